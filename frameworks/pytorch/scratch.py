"""The chapter's data parallelism written by hand, in PyTorch."""
import torch
from torch import nn

from .devices import torch_device
from .lenet import lenet, loss_sum, to_layout


class Scratch:
    def get_params(self, params, device):
        d = torch_device(device)
        return [to_layout(torch.tensor(p, device=d)).requires_grad_() for p in params]

    def read_params(self, replica):
        return [p.detach().cpu().numpy().copy() for p in replica]

    def write_params(self, replica, params):
        with torch.no_grad():
            for p, v in zip(replica, params):
                p.copy_(torch.from_numpy(v))

    def allreduce(self, data):
        # In place ([:] =), so every device's tensor -- not a new list entry -- gets the sum.
        with torch.no_grad():
            for i in range(1, len(data)):
                data[0][:] += data[i].to(data[0].device)
            for i in range(1, len(data)):
                data[i][:] = data[0].to(data[i].device)

    def split_batch(self, X, y, devices):
        ds = [torch_device(d) for d in devices]
        if all(d.type == "cuda" for d in ds):
            return nn.parallel.scatter(X, ds), nn.parallel.scatter(y, ds)
        # scatter is CUDA-only; on CPUs cut the batch the same way (contiguous chunks)
        return ([c.to(d) for c, d in zip(X.chunk(len(ds)), ds)],
                [c.to(d) for c, d in zip(y.chunk(len(ds)), ds)])

    def train_batch(self, X, y, replicas, devices, lr):
        X_shards, y_shards = self.split_batch(X, y, devices)
        ls = [loss_sum(lenet(Xs, W), ys) for Xs, ys, W in zip(X_shards, y_shards, replicas)]
        for l in ls:
            l.backward()
        for i in range(len(replicas[0])):
            self.allreduce([r[i].grad for r in replicas])
        batch = X.shape[0]
        with torch.no_grad():
            for r in replicas:
                torch._foreach_add_(r, [p.grad for p in r], alpha=-lr / batch)
                for p in r:
                    p.grad = None
            d0 = replicas[0][0].device
            return sum(l.detach().to(d0) for l in ls) / batch
