"""Native mode: DistributedDataParallel, one process per device."""
import os
import socket

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from common.contract import Trainer
from common.data import shard_bounds
from common.scratch import predict_in_batches

from .devices import torch_device
from .lenet import lenet, loss_sum, to_layout


class LeNetModule(nn.Module):
    def __init__(self, params):
        super().__init__()
        self.params = nn.ParameterList([nn.Parameter(to_layout(torch.tensor(p))) for p in params])

    def forward(self, X):
        return lenet(X, list(self.params))


class DDPTrainer(Trainer):
    def __init__(self, params, device, lr, rank, world):
        self.device, self.rank, self.world = torch_device(device), rank, world
        self.module = LeNetModule(params).to(self.device)
        self.model = self.module
        if world > 1:
            ids = [self.device.index] if self.device.type == "cuda" else None
            self.model = DistributedDataParallel(self.module, device_ids=ids)
        self.opt = torch.optim.SGD(self.module.parameters(), lr=lr)
        self.batch = None

    def step(self, X, y):
        self.batch = len(X)
        lo, hi = shard_bounds(len(X), self.world)[self.rank]
        Xs = torch.from_numpy(X[lo:hi]).to(self.device)
        ys = torch.from_numpy(y[lo:hi]).to(self.device)
        loss = loss_sum(self.model(Xs), ys)
        # DDP averages gradients over ranks; this scale makes the result the gradient
        # of the full batch's mean loss, whatever the shard sizes.
        (loss * (self.world / self.batch)).backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return loss.detach()

    def losses(self, handles):
        sums = torch.stack(handles)
        if self.world > 1:
            dist.all_reduce(sums)        # one collective per epoch, not per step
        return sums.cpu().numpy() / self.batch

    def predict(self, X):
        with torch.no_grad():
            return predict_in_batches(
                lambda x: self.module(torch.from_numpy(x).to(self.device)).cpu().numpy(), X)

    def replica_params(self):
        return [[p.detach().cpu().numpy().copy() for p in self.module.params]]

    def load_params(self, params):
        with torch.no_grad():
            for p, v in zip(self.module.params, params):
                p.copy_(torch.from_numpy(np.asarray(v)))


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(rank, fn, world, port, args):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    gpu = torch.cuda.device_count() >= world
    dist.init_process_group("nccl" if gpu else "gloo", rank=rank, world_size=world)
    try:
        fn(rank, world, *args)
    finally:
        dist.destroy_process_group()


class Native:
    native_uses_processes = True
    native_description = ("torch.nn.parallel.DistributedDataParallel, one process per device "
                          "(gloo on CPU, nccl on GPU)")

    def native_trainer(self, params, devices, lr, rank=0, world=1):
        if world == 1 and len(devices) > 1:
            raise ValueError("PyTorch native mode runs one process per device; use spawn")
        return DDPTrainer(params, devices[0], lr, rank, world)

    def spawn(self, fn, nprocs, args):
        mp.spawn(_entry, args=(fn, nprocs, _free_port(), args), nprocs=nprocs, join=True)
