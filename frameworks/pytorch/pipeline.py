"""Model mode in PyTorch: the stage calls that common/pipeline.py's GPipe loop is
written on. A stage's input is a detached leaf that records its gradient
(requires_grad_); torch.autograd.backward(out, grad) takes the gradient of the
output and leaves the input's in X.grad. Stages on one CPU device run in processes
of their own, handing over with torch.distributed.send/recv (gloo; nccl on GPUs)."""
import numpy as np
import torch
import torch.distributed as dist

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
