"""Model mode in PyTorch: the stage calls that common/core/pipeline.py's GPipe loop is
written on. A stage's input is a detached leaf that records its gradient
(requires_grad_); torch.autograd.backward(out, grad) takes the gradient of the
output and leaves the input's in X.grad. Stages on one CPU device run in processes
of their own, handing over with torch.distributed.send/recv (gloo; nccl on GPUs)."""
import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from common.launch import launcher

from .devices import torch_device
from .models import loss_sum


class Pipeline:
    def stage_forward(self, replica, X, y=None, training=True):
        units = replica.stage.units
        if not training:
            with torch.no_grad():
                return self.apply_stage(replica, X, False), None
        X = X.detach().requires_grad_(units[0] > 0)
        out = self.apply_stage(replica, X, True)
        if y is not None:
            out = loss_sum(out, y)
        return out.detach(), (X, out)

    def stage_backward(self, replica, tape, grad, first):
        X, out = tape                 # gradients add up in p.grad; sgd clears them
        torch.autograd.backward(out, grad)
        return X.grad if X.requires_grad else None

    tape_bytes_by = "torch.autograd.graph.saved_tensors_hooks (the tensors autograd saves)"

    def measure_tape(self, replica, forward):
        full = replica.full
        own = {t.untyped_storage().data_ptr() for t in (*full, *full.state)}
        saved = {}

        def pack(t):               # each tensor once (a ReLU's output is saved twice), no parameter
            storage = t.untyped_storage().data_ptr()
            if storage not in own:
                saved[storage, t.storage_offset(), tuple(t.shape)] = t.numel() * t.element_size()
            return t
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            result = forward()
        return result, sum(saved.values())

    def send(self, x, dst):
        return dist.isend(x.contiguous(), dst)       # non-blocking: the stage goes on

    def recv(self, shape, src, device):
        x = torch.empty(shape, dtype=torch.float32, device=torch_device(device))
        dist.recv(x, src)
        return x

    def gather_floats(self, values):
        mine = torch.tensor(np.asarray(values, np.float64))
        out = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
        dist.all_gather(out, mine)
        return torch.stack(out).numpy()


def engine_probe_rank() -> None:
    """One rank of a 2-stage GPipe step with torch.distributed.pipelining (gloo on a CPU):
    does PyTorch's own pipeline engine run here? (benchmarks.pipeline --probe-engines;
    the suite's model mode hands over by itself, since the schedule hides the per-stage
    times a record keeps)."""
    from torch.distributed.pipelining import PipelineStage, ScheduleGPipe
    r = launcher.RankInfo.from_env()
    dist.init_process_group("gloo", init_method=f"tcp://{r.master_addr}:{r.master_port}",
                            rank=r.rank, world_size=r.world_size)
    try:
        torch.manual_seed(0)
        net = nn.Sequential(nn.Conv2d(1, 20, 3), nn.ReLU(), nn.AvgPool2d(2), nn.Flatten(),
                            nn.Linear(20 * 13 * 13, 10))
        stage = PipelineStage(net[:3] if r.rank == 0 else net[3:], r.rank, 2, torch.device("cpu"))
        schedule = ScheduleGPipe(stage, 4, scale_grads=False, loss_fn=lambda out, y:
                                 nn.functional.cross_entropy(out, y, reduction="sum"))
        X, y = torch.randn(16, 1, 28, 28), torch.randint(0, 10, (16,))
        losses = []
        schedule.step(X) if r.rank == 0 else schedule.step(target=y, losses=losses)
        if losses:
            print(f"torch.distributed.pipelining ScheduleGPipe, 2 processes, gloo: ran "
                  f"({len(losses)} micro-batch losses)", flush=True)
    finally:
        dist.destroy_process_group()
