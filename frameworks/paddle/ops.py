"""PaddlePaddle's calls for the device experiments (common.experiments.device_experiments). Paddle has
one CPU place per process; its collective runs one process per device."""
import paddle
import paddle.distributed as dist

from common.experiments import ops


class Ops(ops.Ops):
    native_allreduce_description = ("paddle.distributed.all_reduce, one process per device "
                                    "started by the suite's launcher (gloo on CPU, nccl on GPU)")
    native_allreduce_processes = 2

    def visible_devices(self, kind):
        if kind == "cpu":
            return ["cpu:0"]
        return [f"gpu:{i}" for i in range(self.backend.num_gpus())]

    def matmul(self, a, b):
        return paddle.matmul(a, b)

    def norm(self, x):
        return paddle.linalg.norm(x)

    def stack(self, scalars):
        return paddle.stack(list(scalars))

    def item(self, x):
        return float(x.item())

    def add_one(self, x):
        return x + 1

    def save(self, arrays, path):
        paddle.save(list(arrays), path)

    def load(self, path, device, like):
        return [self.backend.to_device(x, device) for x in paddle.load(path)]

    def host_to_device(self, host, device):
        return self.backend.array(host, device)

    def device_to_host(self, x):
        return x.cpu()

    def products_and_copies(self, a, b, n, overlap):
        if overlap:
            raise ops.NotApplicable("not written for Paddle here: its eager API's non-blocking "
                                    "copies were not available to test (no GPU lent)")
        return lambda: [paddle.matmul(a, b).numpy() for _ in range(n)]

    def collective(self, arrays):
        if not dist.is_initialized():
            raise ops.NotApplicable("paddle.distributed needs a process group (one process per device)")
        x = arrays[0]

        def run():
            dist.all_reduce(x)
            return [x]
        return run
