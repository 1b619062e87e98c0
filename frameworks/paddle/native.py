"""Native mode: paddle.DataParallel, one process per device (started by
common.launcher; join() enters the process group: gloo on CPU, nccl on GPU)."""
import os

import numpy as np
import paddle
import paddle.distributed as dist

from common.contract import Trainer, predict_in_batches
from common.data import shard_bounds

from .models import loss_sum


class OpsLayer(paddle.nn.Layer):
    """A model of models.py as a paddle Layer: parameters as Parameters, state
    (BatchNorm running statistics) as buffers."""

    def __init__(self, ops, params, state):
        super().__init__()
        self.ops = ops
        self.ps = paddle.nn.ParameterList([
            self.create_parameter(p.shape, default_initializer=paddle.nn.initializer.Assign(p))
            for p in ops.to_framework(params)])
        self.state = [paddle.to_tensor(s) for s in state]
        for i, s in enumerate(self.state):
            self.register_buffer(f"state{i}", s)

    def forward(self, X):
        return self.ops.apply(list(self.ps), self.state, X, self.training)


class DataParallelTrainer(Trainer):
    def __init__(self, layer, lr, rank, world):
        self.rank, self.world = rank, world
        self.layer = layer
        self.model = paddle.DataParallel(self.layer) if world > 1 else self.layer
        self.opt = paddle.optimizer.SGD(learning_rate=lr, parameters=self.layer.parameters())
        self.batch = None

    def step(self, X, y):
        self.batch = len(X)
        lo, hi = shard_bounds(len(X), self.world)[self.rank]
        self.model.train()
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
        self.layer.eval()
        with paddle.no_grad():
            return predict_in_batches(lambda x: self.layer(paddle.to_tensor(x)).numpy(), X)

    def replica_params(self):
        return [self.layer.ops.from_framework([p.numpy().copy() for p in self.layer.ps])]

    def replica_state(self):
        return [[s.numpy().copy() for s in self.layer.state]]

    def load_params(self, params, state):
        for p, v in zip(self.layer.ps, self.layer.ops.to_framework(params)):
            p.set_value(np.asarray(v))
        for s, v in zip(self.layer.state, state):
            s.set_value(np.asarray(v))


class Native:
    sync_bn_needs_gpu = ("paddle.nn.SyncBatchNorm has GPU kernels only (CPU build: 'The kernel "
                         "`sync_batch_norm` is not registered')")

    def native_trainer(self, model, params, devices, lr, rank=0, world=1, sync_bn=False):
        if sync_bn:
            self.check_sync_bn(devices)
            # not built yet: on GPUs it would need paddle.nn.SyncBatchNorm layers in place of
            # the functional model's batch_norm (a run says failed, never a false figure)
            raise NotImplementedError("paddle sync-bn on GPUs is not built yet")
        if world == 1 and len(devices) > 1:
            raise ValueError("Paddle native mode runs one process per device (common.launcher)")
        from common import models
        layer = OpsLayer(self.model_ops(model), params, models.get(model).init_state())
        return DataParallelTrainer(layer, lr, rank, world)

    def join(self, rank):
        # paddle.distributed reads its own names for what the launcher set
        gpu = self.num_gpus() > rank.local_rank
        os.environ.update({
            "PADDLE_TRAINER_ID": str(rank.rank), "PADDLE_TRAINERS_NUM": str(rank.world_size),
            "PADDLE_CURRENT_ENDPOINT": f"{rank.master_addr}:{rank.master_port + 1 + rank.rank}",
            "PADDLE_TRAINER_ENDPOINTS": ",".join(f"{rank.master_addr}:{rank.master_port + 1 + r}"
                                                 for r in range(rank.world_size)),
            "PADDLE_DISTRI_BACKEND": "nccl" if gpu else "gloo"})
        if gpu:
            os.environ["FLAGS_selected_gpus"] = str(rank.local_rank)
        dist.init_parallel_env()
