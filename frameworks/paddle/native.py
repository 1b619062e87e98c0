"""Native mode: paddle.DataParallel, one process per device, started with
paddle.distributed.spawn (gloo on CPU, nccl on GPU)."""
import numpy as np
import paddle
import paddle.distributed as dist

from common.contract import Trainer
from common.data import shard_bounds
from common.scratch import predict_in_batches

from .lenet import lenet, loss_sum


class LeNetLayer(paddle.nn.Layer):
    def __init__(self, params):
        super().__init__()
        self.ps = paddle.nn.ParameterList([
            self.create_parameter(p.shape, default_initializer=paddle.nn.initializer.Assign(p))
            for p in params])

    def forward(self, X):
        return lenet(X, list(self.ps))


class DataParallelTrainer(Trainer):
    def __init__(self, params, lr, rank, world):
        self.rank, self.world = rank, world
        self.layer = LeNetLayer(params)
        self.model = paddle.DataParallel(self.layer) if world > 1 else self.layer
        self.opt = paddle.optimizer.SGD(learning_rate=lr, parameters=self.layer.parameters())
        self.batch = None

    def step(self, X, y):
        self.batch = len(X)
        lo, hi = shard_bounds(len(X), self.world)[self.rank]
        loss = loss_sum(self.model(paddle.to_tensor(X[lo:hi])), paddle.to_tensor(y[lo:hi]))
        # DataParallel averages gradients over ranks; this scale makes the result
        # the gradient of the full batch's mean loss, whatever the shard sizes.
        (loss * (self.world / self.batch)).backward()
        self.opt.step()
        self.opt.clear_grad()
        return loss.detach()

    def losses(self, handles):
        sums = paddle.stack(handles)
        if self.world > 1:
            dist.all_reduce(sums)        # one collective per epoch, not per step
        return sums.numpy() / self.batch

    def predict(self, X):
        with paddle.no_grad():
            return predict_in_batches(lambda x: self.layer(paddle.to_tensor(x)).numpy(), X)

    def replica_params(self):
        return [[p.numpy().copy() for p in self.layer.ps]]

    def load_params(self, params):
        for p, v in zip(self.layer.ps, params):
            p.set_value(np.asarray(v))


def _entry(fn, world, args):
    dist.init_parallel_env()
    fn(dist.get_rank(), world, *args)


class Native:
    native_uses_processes = True
    native_description = ("paddle.DataParallel, one process per device via "
                          "paddle.distributed.spawn (gloo on CPU, nccl on GPU)")

    def native_trainer(self, params, devices, lr, rank=0, world=1):
        if world == 1 and len(devices) > 1:
            raise ValueError("Paddle native mode runs one process per device; use spawn")
        return DataParallelTrainer(params, lr, rank, world)

    def spawn(self, fn, nprocs, args):
        backend = "nccl" if self.num_gpus() >= nprocs else "gloo"
        dist.spawn(_entry, args=(fn, nprocs, args), nprocs=nprocs, backend=backend)
