"""PyTorch's calls for the device experiments (common.experiments.device_experiments)."""
import torch
import torch.distributed as dist

from common.experiments import ops

from .devices import torch_device


class Ops(ops.Ops):
    native_allreduce_description = ("torch.distributed.all_reduce, one process per device "
                                    "(gloo on CPU, nccl on GPU)")
    native_allreduce_processes = 2

    def visible_devices(self, kind):
        if kind == "cpu":
            return ["cpu:0"]              # one CPU device
        return [f"gpu:{i}" for i in range(torch.cuda.device_count())]

    def matmul(self, a, b):
        return torch.mm(a, b)

    def norm(self, x):
        return torch.linalg.norm(x)

    def stack(self, scalars):
        return torch.stack(list(scalars))

    def item(self, x):
        return x.item()

    def add_one(self, x):
        return x + 1

    def save(self, arrays, path):
        torch.save(list(arrays), path)

    def load(self, path, device, like):
        return torch.load(path, map_location=torch_device(device), weights_only=True)

    def host_to_device(self, host, device):
        t = torch.from_numpy(host)
        d = torch_device(device)
        if d.type == "cuda":
            t = t.pin_memory()
            return t.to(d, non_blocking=True)
        return t.to(d)

    def device_to_host(self, x):
        return x.cpu()

    def products_and_copies(self, a, b, n, overlap):
        if a.device.type != "cuda":
            raise ops.NotApplicable("no copy to overlap: the arrays already live on the host")
        if not overlap:
            return lambda: [torch.mm(a, b).cpu() for _ in range(n)]
        copy_stream = torch.cuda.Stream(a.device)
        bufs = [torch.empty((a.shape[0], b.shape[1]), dtype=a.dtype, pin_memory=True)
                for _ in range(n)]

        def run():
            for buf in bufs:
                c = torch.mm(a, b)
                copy_stream.wait_stream(torch.cuda.current_stream(a.device))
                with torch.cuda.stream(copy_stream):
                    buf.copy_(c, non_blocking=True)
                c.record_stream(copy_stream)
            copy_stream.synchronize()
            return bufs
        return run

    def collective(self, arrays):
        if not dist.is_initialized():
            raise ops.NotApplicable("torch.distributed needs a process group (one process per device)")
        x = arrays[0]

        def run():
            dist.all_reduce(x)
            return [x]
        return run
