"""Native mode: paddle.DataParallel, one process per device (started by
common.launch.launcher; join() enters the process group: gloo on CPU, nccl on GPU)."""
import os

import numpy as np
import paddle
import paddle.distributed as dist

from common.core.contract import ModuleTrainer, NotApplicable
from common import models
from common.facts.data import shard_bounds
from common.facts.settings import COMM_BUFFER_MB

from .models import ResNet18Layer, ViTLayer, loss_sum


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

    def read(self):
        return (self.ops.from_framework([p.numpy().copy() for p in self.ps]),
                [s.numpy().copy() for s in self.state])

    def load(self, params, state):
        values = list(self.ops.to_framework(params)) + list(state)
        for t, v in zip(list(self.ps) + self.state, values):
            t.set_value(np.asarray(v))


# Models whose native form is a layered paddle.nn model of their own (the chapter's
# concise ResNet-18, with BatchNorm2D that SyncBatchNorm can replace; the ViT at each
# size); the others wrap their functional form in an OpsLayer.
# family (common.models.family) -> build(model, params, state)
LAYERED = {"resnet18": lambda model, params, state: ResNet18Layer(params, state, model),
           "vit": lambda model, params, state: ViTLayer(params, state, model)}


class DataParallelTrainer(ModuleTrainer):
    # every rank runs the whole batch (tensor parallelism)
    whole_batch = False

    def __init__(self, layer, lr, rank, world, execution="eager", **comm):
        self.rank, self.world = rank, world
        self.module = layer
        # compiled: the layer's forward (training and evaluation) converted by
        # paddle.jit.to_static into static programs; DataParallel wraps it as it is
        self.model = paddle.jit.to_static(layer, full_graph=True) if execution == "compiled" else layer
        if world > 1:
            self.model = self._distribute(self.model, comm)
        # after _distribute: the optimizer takes the parameters it left (TPTrainer's replaced)
        self.opt = paddle.optimizer.SGD(learning_rate=lr, parameters=self.module.parameters())
        self.batch = None

    def _distribute(self, model, comm):
        return paddle.DataParallel(model, **comm)

    def step(self, X, y):
        self.batch = len(X)
        lo, hi = (0, len(X)) if self.whole_batch else shard_bounds(len(X), self.world)[self.rank]
        self.model.train()
        loss = loss_sum(self.model(paddle.to_tensor(X[lo:hi])), paddle.to_tensor(y[lo:hi]))
        # DataParallel averages gradients over ranks; this scale makes the result
        # the gradient of the full batch's mean loss, whatever the shard sizes.
        (loss * ((1 if self.whole_batch else self.world) / self.batch)).backward()
        self._update()
        return loss.detach()

    def _update(self):
        self.opt.step()
        self.opt.clear_grad()

    def losses(self, handles):
        sums = paddle.stack(handles)
        if self.world > 1 and not self.whole_batch:
            dist.all_reduce(sums)        # one collective per epoch, not per step
        return sums.numpy() / self.batch

    def logits(self, X):
        self.module.eval()
        with paddle.no_grad():
            return self.module(paddle.to_tensor(X)).numpy()


def _local_bytes(t) -> int:
    """The bytes of a tensor this rank holds: a distributed tensor's own piece
    (_local_value), a plain one whole."""
    t = t._local_value() if t.is_dist() else t
    return int(t.numel()) * t.element_size()


class TPTrainer(DataParallelTrainer):
    """Tensor parallelism with Paddle's auto-parallel in dynamic mode, one process per
    device: the ViT's parameters made distributed tensors over a 1-D ProcessMesh of the
    ranks (paddle.distributed.shard_layer), each weight TENSOR_SPLIT cuts Shard(its axis)
    (Q, K, V and the MLP's first layer by columns, the attention's output projection and
    the MLP's second layer by rows: Megatron's cut), the rest Replicate. The layer's code
    is unchanged (its global view): the ops' SPMD rules keep the heads and MLP features
    cut between the two (seen: Shard(2) into out_proj and fc2) and reshard (all-reduce)
    the row-parallel outputs and the replicated parameters' gradients. Every rank runs
    the whole batch. (fleet's ColumnParallelLinear and RowParallelLinear, with fleet.init
    at mp_degree 2, do not run on CPU: their forward, gloo, 2 processes: "Do not support
    c_identity for cpu kernel now.")"""
    whole_batch = True

    def __init__(self, layer, split, lr, rank, world):
        self.split, self.grad_held = split, 0
        super().__init__(layer, lr, rank, world)

    def _update(self):
        # this rank's bytes of the gradients the optimizer steps with: their local pieces,
        # read at the first step (the same layout at every step: the timed steps after it
        # pay nothing for it)
        if not self.grad_held:
            self.grad_held = sum(_local_bytes(p.grad) for p in self.module.slots()
                                 if p.grad is not None)
        super()._update()

    def _distribute(self, model, comm):
        mesh = dist.ProcessMesh(list(range(self.world)), dim_names=["mp"])
        # the layer's slots are the common order and layout: TENSOR_SPLIT's axes are theirs
        axis = {id(p): a for p, a in zip(self.module.slots(), self.split)}

        def shard(name, layer, mesh):
            for key, p in list(layer.named_parameters(include_sublayers=False)):
                layer.add_parameter(key, dist.shard_tensor(
                    p, mesh, [dist.Replicate() if axis[id(p)] is None else dist.Shard(axis[id(p)])]))
        dist.shard_layer(self.module, mesh, shard)
        return model

    def replica_params(self):
        # every rank calls it: each distributed parameter gathered whole (a collective each)
        return [[(dist.unshard_dtensor(p) if p.is_dist() else p).numpy()
                 for p in self.module.slots()]]

    def replica_state(self):
        return [[]]                      # the ViT has none

    # load_params is ModuleTrainer's: set_value shards a whole NumPy value as the
    # parameter's placements say

    def figures(self):
        ps = self.module.slots()

        def whole(p):            # held whole on every rank: a plain tensor or a replicated one
            return not p.is_dist() or all(isinstance(q, dist.Replicate) for q in p.placements)
        every = []                        # each rank's (parameters', gradients') bytes
        dist.all_gather_object(every, (sum(_local_bytes(p) for p in ps), self.grad_held))
        size = [int(np.prod(p.shape)) * p.element_size() for p in ps]
        return {"shard_bytes": [held for held, _ in every], "grad_bytes": [g for _, g in every],
                "param_bytes": sum(size),
                "replicated_bytes": sum(n for n, p in zip(size, ps) if whole(p))}


class Native:
    # DataParallel's options that the communication settings set (common/facts/settings.py):
    # gradient buffers of 0.25 MB (defaults 25 MB, the last 1 MB: all of LeNet's 516 KB in
    # one buffer, reduced after the whole backward pass)
    COMMUNICATION = {"small-buffers": {"comm_buffer_size": COMM_BUFFER_MB,
                                       "last_comm_buffer_size": COMM_BUFFER_MB}}

    sync_bn_needs_gpu = ("paddle.nn.SyncBatchNorm has GPU kernels only (CPU build, gloo, under "
                         "DataParallel, its forward: 'The kernel `sync_batch_norm` is not "
                         "registered')")

    def build_native_trainer(self, model, params, devices, lr, execution, rank, world, sync_bn):
        state = models.get(model).init_state()
        family = models.family(model)
        layer = (LAYERED[family](model, params, state) if family in LAYERED
                 else OpsLayer(self.model_ops(model), params, state))
        if sync_bn:
            # BatchNorm2D -> SyncBatchNorm: batch statistics all-reduced over the ranks
            layer = paddle.nn.SyncBatchNorm.convert_sync_batchnorm(layer)
        return DataParallelTrainer(layer, lr, rank, world, execution, **self.comm)

    def build_tp_trainer(self, model, params, devices, lr, execution, rank, world):
        if execution != "eager":
            raise NotApplicable("the suite's auto-parallel tensor-parallel trainer runs eagerly; "
                                "paddle.jit.to_static over distributed tensors is not tried here")
        if world < 2:
            raise NotApplicable("auto-parallel's cut over a ProcessMesh of the ranks: run 2 or "
                                "more devices (a process each)")
        layer = LAYERED["vit"](model, params, [])
        return TPTrainer(layer, models.get(model).TENSOR_SPLIT, lr, rank, world)

    def join(self, rank, timeout=None):
        # paddle.distributed.launch has set its own variables; under common.launch.launcher,
        # paddle.distributed reads its names for what that launcher set
        gpu = self.num_gpus() > rank.local_rank
        if "PADDLE_TRAINER_ENDPOINTS" not in os.environ:
            os.environ.update({
                "PADDLE_TRAINER_ID": str(rank.rank), "PADDLE_TRAINERS_NUM": str(rank.world_size),
                "PADDLE_CURRENT_ENDPOINT": f"{rank.master_addr}:{rank.master_port + 1 + rank.rank}",
                "PADDLE_TRAINER_ENDPOINTS": ",".join(f"{rank.master_addr}:{rank.master_port + 1 + r}"
                                                     for r in range(rank.world_size)),
                "PADDLE_DISTRI_BACKEND": "nccl" if gpu else "gloo"})
        if gpu:
            os.environ["FLAGS_selected_gpus"] = str(rank.local_rank)
        dist.init_parallel_env()
