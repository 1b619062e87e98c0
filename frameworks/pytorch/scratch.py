"""The chapter's data parallelism by hand, in PyTorch: its primitives. The
train_batch that strings them together is common/core/scratch.py's."""
import torch

from common.core.contract import Replica
from common.facts.data import shard_bounds
from common.core.scratch import training_forward

from .devices import compile_check, torch_device
from .models import loss_sum, to_layout


class Scratch:
    def get_params(self, params, device, model="lenet", state=None):
        d = torch_device(device)
        ops = self.model_ops(model)
        layout = to_layout if ops.channels_last else (lambda p: p)
        return Replica([layout(torch.tensor(p, device=d)).requires_grad_()
                        for p in ops.to_framework(params)], model, device,
                       [torch.tensor(s, device=d) for s in (state or [])])

    def read_params(self, replica):
        return self.model_ops(replica.model).from_framework(
            [p.detach().cpu().numpy().copy() for p in replica])

    def read_state(self, replica):
        return [s.cpu().numpy().copy() for s in replica.state]

    def write_params(self, replica, params, state=None):
        with torch.no_grad():
            for p, v in zip(replica, self.model_ops(replica.model).to_framework(params)):
                p.copy_(torch.from_numpy(v))
            for s, v in zip(replica.state, state or []):
                s.copy_(torch.from_numpy(v))

    def allreduce(self, data):
        # In place ([:] =), so every device's tensor -- not a new list entry -- gets the sum.
        with torch.no_grad():
            for i in range(1, len(data)):
                data[0][:] += data[i].to(data[0].device)
            for i in range(1, len(data)):
                data[i][:] = data[0].to(data[i].device)

    def split_batch(self, X, y, devices):
        # contiguous shards as every framework cuts them (nn.parallel.scatter, the
        # chapter's call, is CUDA-only and sizes uneven shards differently)
        ds = [torch_device(d) for d in devices]
        bounds = shard_bounds(X.shape[0], len(ds))
        return ([X[lo:hi].to(d, non_blocking=True) for (lo, hi), d in zip(bounds, ds)],
                [y[lo:hi].to(d, non_blocking=True) for (lo, hi), d in zip(bounds, ds)])

    def wrap_train_batch(self, step, devices, execution):
        if execution == "compiled":
            compile_check(devices)      # once for the replica set, not in every step
        return step

    def shard_loss_and_grads(self, replica, X, y):
        # compiled: torch.compile (AOTAutograd compiles the backward too)
        loss, logits = training_forward(self, replica.model, replica.execution, loss_sum,
                                        torch.compile)(list(replica), replica.state, X, y)
        loss.backward()
        return loss.detach(), logits.detach()

    def grads(self, replica):
        return [p.grad for p in replica]

    def sgd(self, replica, scale):
        with torch.no_grad():
            torch._foreach_add_(list(replica), [p.grad for p in replica], alpha=-scale)
        for p in replica:
            p.grad = None

    def add(self, values, device):
        d = torch_device(device)
        return sum(v.to(d) for v in values)

    # sharded mode's primitives (common/core/sharded.py: all_gather, reduce_scatter)
    def rows(self, x, lo, hi):
        return x.detach()[lo:hi].clone()

    def concat(self, parts, device):
        return torch.cat(parts)

    def assign(self, x, value):
        with torch.no_grad():
            x.copy_(value)

    def clear_grads(self, replica):
        for p in replica:
            p.grad = None          # backward adds into a gradient that is there

    # tensor mode's primitives (common/core/tensor.py): a piece's own autograd graph
    def record(self, fn, inputs, device, consts=()):
        leaves = [x.detach().requires_grad_() for x in inputs]
        out = fn(*leaves, *consts)
        return out.detach(), (out, leaves)

    def backprop(self, tape, grad):
        out, leaves = tape
        return list(torch.autograd.grad(out, leaves, grad))
