"""Native mode: DistributedDataParallel, one process per device (started by
common.launch.launcher; join() enters the process group)."""
import datetime

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel

from common import models
from common.core.contract import ModuleTrainer, NeedsGPU, NotApplicable
from common.facts.data import shard_bounds
from common.facts.settings import COMM_BUFFER_MB

from .devices import compile_check, torch_device
from .models import LAYERED, ViTModule, loss_sum, to_layout

# DDP's communication hooks by the name a setting gives (common/facts/settings.py):
# gradients cast to float16 for the all-reduce, and back
COMM_HOOKS = {"fp16": default_hooks.fp16_compress_hook}


class OpsModule(nn.Module):
    """A model of models.py as an nn.Module: its parameters as nn.Parameters, its
    state (BatchNorm running statistics) as buffers, so DDP sees both."""

    def __init__(self, ops, params, state):
        super().__init__()
        self.ops = ops
        layout = to_layout if ops.channels_last else (lambda p: p)
        self.params = nn.ParameterList([nn.Parameter(layout(torch.tensor(p)))
                                        for p in ops.to_framework(params)])
        for i, s in enumerate(state):
            self.register_buffer(f"state{i}", torch.tensor(s))
        self.n_state = len(state)

    def state_tensors(self):
        return [getattr(self, f"state{i}") for i in range(self.n_state)]

    def forward(self, X):
        return self.ops.apply(list(self.params), self.state_tensors(), X, self.training)

    def read(self):
        return (self.ops.from_framework([p.detach().cpu().numpy().copy() for p in self.params]),
                [s.cpu().numpy().copy() for s in self.state_tensors()])

    def load(self, params, state):
        with torch.no_grad():
            for p, v in zip(self.params, self.ops.to_framework(params)):
                p.copy_(torch.from_numpy(np.asarray(v)))
            for s, v in zip(self.state_tensors(), state):
                s.copy_(torch.from_numpy(np.asarray(v)))



class DDPTrainer(ModuleTrainer):
    # every rank runs the whole batch (tensor parallelism; nn.DataParallel scatters it itself)
    whole_batch = False

    def __init__(self, module, device, lr, rank, world, execution="eager", bucket_cap_mb=None,
                 comm_hook=None):
        self.device, self.rank, self.world = torch_device(device), rank, world
        self.module = module.to(self.device)
        self.model = self._distribute(bucket_cap_mb, comm_hook) if world > 1 else self.module
        if execution == "compiled":
            # training steps through the compiled model (under DDP, its DDPOptimizer
            # splits the graph at the gradient buckets so that all-reduces overlap);
            # evaluation runs the module as it is
            self.model = torch.compile(self.model)
        self.opt = torch.optim.SGD(self.module.parameters(), lr=lr)
        self.batch = None

    def _distribute(self, bucket_cap_mb, comm_hook):
        ids = [self.device.index] if self.device.type == "cuda" else None
        model = DistributedDataParallel(self.module, device_ids=ids,
                                        **({"bucket_cap_mb": bucket_cap_mb} if bucket_cap_mb else {}))
        if comm_hook:
            model.register_comm_hook(None, COMM_HOOKS[comm_hook])
        return model

    def step(self, X, y):
        self.batch = len(X)
        lo, hi = (0, len(X)) if self.whole_batch else shard_bounds(len(X), self.world)[self.rank]
        Xs = torch.from_numpy(X[lo:hi]).to(self.device)
        ys = torch.from_numpy(y[lo:hi]).to(self.device)
        self.model.train()
        loss = loss_sum(self.model(Xs), ys)
        # DDP averages gradients over ranks; this scale makes the result the gradient
        # of the full batch's mean loss, whatever the shard sizes.
        (loss * ((1 if self.whole_batch else self.world) / self.batch)).backward()
        self._update()
        return loss.detach()

    def _update(self):
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)

    def losses(self, handles):
        sums = torch.stack(handles)
        if self.world > 1 and not self.whole_batch:
            dist.all_reduce(sums)        # one collective per epoch, not per step
        return sums.cpu().numpy() / self.batch

    def logits(self, X):
        self.module.eval()
        with torch.no_grad():
            # float(): under bfloat16 autocast a final nn.Linear's logits are bfloat16,
            # which NumPy has no dtype for
            return self.module(torch.from_numpy(X).to(self.device)).float().cpu().numpy()



def _local_bytes(t) -> int:
    """The bytes of a tensor this rank holds: a DTensor's local part, a plain tensor whole."""
    t = t.to_local() if hasattr(t, "to_local") else t
    return t.numel() * t.element_size()


class FSDPTrainer(DDPTrainer):
    """FSDP2 (torch.distributed.fsdp.fully_shard) over the ranks, one process per device:
    each block of a layered model (its `blocks`) a unit of its own, the root the rest.
    Between steps every rank holds its rows (dim 0) of each parameter as a DTensor; the
    forward pass all-gathers a unit's parameters and frees them after it, the backward
    gathers them again and reduce-scatters (averages) the gradients: ZeRO-3. The step,
    its loss scaling and the losses are DDP's (DDPTrainer). `fresh` builds the plain
    module, through which the whole parameters are read and written (full state dicts)."""

    def __init__(self, module, fresh, device, lr, rank, world):
        self.fresh, self.grad_held = fresh, 0
        super().__init__(module, device, lr, rank, world)

    def _update(self):
        # this rank's bytes of the gradients the optimizer steps with: their local shards,
        # read at the first step (their layout is the same at every step: the timed steps
        # after it pay nothing for it)
        if not self.grad_held:
            self.grad_held = sum(_local_bytes(p.grad) for p in self.module.parameters()
                                 if p.grad is not None)
        super()._update()

    def _distribute(self, bucket_cap_mb, comm_hook):
        from torch.distributed.fsdp import fully_shard
        with torch.no_grad():      # FSDP2 shards contiguous parameters only (not channels-last)
            for p in self.module.parameters():
                p.data = p.data.contiguous()
        for block in getattr(self.module, "blocks", []):
            fully_shard(block)
        return fully_shard(self.module)

    def _whole(self):
        """The plain module holding every rank's parameters gathered (every rank calls it)."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
        whole = self.fresh()
        full = get_model_state_dict(self.module, options=StateDictOptions(full_state_dict=True))
        whole.load_state_dict({k: v.cpu() for k, v in full.items()})
        return whole

    def replica_params(self):
        return [self._whole().read()[0]]

    def replica_state(self):
        return [self._whole().read()[1]]

    def param_fingerprint(self):
        params, state = self._whole().read()       # one gather for both
        return models.fingerprint([*params, *state])

    def load_params(self, params, state):
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
        whole = self.fresh()
        whole.load(params, state)
        set_model_state_dict(self.module, whole.state_dict(),
                             options=StateDictOptions(full_state_dict=True))

    def _sharded(self) -> list:
        """The parameters as FSDP2 keeps them between steps (an evaluation's forward pass
        may leave the root's gathered): this rank's shards, DTensors."""
        from torch.distributed.fsdp import FSDPModule
        for m in self.module.modules():
            if isinstance(m, FSDPModule):
                m.reshard()
        return list(self.module.parameters())

    def figures(self):
        # a parameter FSDP left whole (none should be) counts whole
        every = [None] * self.world       # each rank's (parameters', gradients') bytes
        dist.all_gather_object(every, (sum(_local_bytes(p) for p in self._sharded()), self.grad_held))
        return {"shard_bytes": [held for held, _ in every], "grad_bytes": [g for _, g in every],
                "param_bytes": sum(p.numel() * p.element_size() for p in self.module.parameters())}


class TPTrainer(FSDPTrainer):
    """Tensor parallelism with DTensor (torch.distributed.tensor.parallel), one process per
    device: parallelize_module over a 1-D device mesh of the ranks, each block's Q, K, V
    and the MLP's first layer ColwiseParallel, the attention's output projection and the
    MLP's second layer RowwiseParallel (Megatron's cut, the model's TENSOR_SPLIT; DTensor
    all-reduces the row-parallel outputs forward and the column-parallel inputs'
    gradients backward), the rest whole on every rank. Every rank runs the whole batch:
    its loss is the batch's, its replicated parameters' gradients the same as the others'.
    Whole parameters are read and written through full state dicts, as FSDP2's."""

    def _distribute(self, bucket_cap_mb, comm_hook):
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                       parallelize_module)
        mesh = init_device_mesh(self.device.type, (self.world,))
        plan = {}
        for i in range(len(self.module.blocks)):
            at = f"blocks.{i}"
            plan.update({f"{at}.attention.{p}": ColwiseParallel() for p in "qkv"})
            plan.update({f"{at}.attention.out": RowwiseParallel(), f"{at}.mlp.0": ColwiseParallel(),
                         f"{at}.mlp.2": RowwiseParallel()})
        return parallelize_module(self.module, mesh, plan)

    whole_batch = True

    def _sharded(self):
        return list(self.module.parameters())

    def figures(self):
        from torch.distributed.tensor import DTensor, Replicate
        params = list(self.module.parameters())

        def whole(p):            # held whole on every rank: a plain tensor or a replicated DTensor
            return not isinstance(p, DTensor) or all(isinstance(q, Replicate) for q in p.placements)
        out = super().figures()
        out["replicated_bytes"] = sum(p.numel() * p.element_size() for p in params if whole(p))
        return out


class DataParallelTrainer(DDPTrainer):
    """The chapter's concise PyTorch: nn.DataParallel in one process replicates the
    module onto every GPU in each step, scatters the batch (torch.chunk: shards
    differ from common.facts.data.shard_bounds only when the device count does not divide
    the batch) and sums the gradients onto the first GPU. BatchNorm's running
    statistics come from the first GPU's replica alone."""
    whole_batch = True

    def __init__(self, module, devices, lr):
        super().__init__(module, devices[0], lr, rank=0, world=1)
        self.model = nn.DataParallel(self.module, device_ids=[torch_device(d).index for d in devices])


class Native:
    # DDP's options that the communication settings set (common/facts/settings.py): the
    # bucket size an all-reduce waits for (default 25 MB, the first bucket 1 MB: all of
    # LeNet's 516 KB in one, reduced after the whole backward pass), and the gradients'
    # type on the link
    COMMUNICATION = {"ddp-small-buckets": {"bucket_cap_mb": COMM_BUFFER_MB},
                     "fp16-compress": {"comm_hook": "fp16"}}

    def dataparallel_trainer(self, model, params, devices, lr, execution):
        if execution != "eager":
            raise NotApplicable("nn.DataParallel replicates the module onto every GPU in each "
                                "step, which torch.compile does not trace; the compiled data "
                                "parallelism is native mode (DDP)")
        if not all(d.startswith("gpu") for d in devices):
            raise NeedsGPU("torch.nn.DataParallel needs CUDA GPUs: without them it calls "
                                "the module on one device, no data parallelism")
        return DataParallelTrainer(self._module(model, params), devices, lr)

    sync_bn_needs_gpu = ("torch.nn.SyncBatchNorm works on CUDA devices only (DDP on CPU: "
                         "'SyncBatchNorm layers only work with GPU modules')")

    def build_native_trainer(self, model, params, devices, lr, execution, rank, world, sync_bn):
        if execution == "compiled":
            compile_check(devices)
        module = self._module(model, params)
        if sync_bn:
            # BatchNorm2d -> SyncBatchNorm: batch statistics all-reduced over the ranks
            module = nn.SyncBatchNorm.convert_sync_batchnorm(module)
        return DDPTrainer(module, devices[0], lr, rank, world, execution, **self.comm)

    @staticmethod
    def _over_ranks(execution, world, tool, call, cuts):
        """A trainer of one model cut over the ranks by `tool` (its API `call`; `cuts`:
        what cuts it): eager, on 2 or more ranks, or NotApplicable saying which."""
        if execution != "eager":
            raise NotApplicable(f"the suite's {tool} trainer runs eagerly; torch.compile over "
                                f"{call} is not tried here")
        if world < 2:
            raise NotApplicable(f"{cuts} over a process group: run 2 or more devices (a "
                                "process each)")

    def build_fsdp_trainer(self, model, params, devices, lr, execution, rank, world):
        self._over_ranks(execution, world, "FSDP2", "fully_shard", "FSDP2 shards")
        return FSDPTrainer(self._module(model, params), lambda: self._module(model, params),
                           devices[0], lr, rank, world)

    def build_tp_trainer(self, model, params, devices, lr, execution, rank, world):
        self._over_ranks(execution, world, "DTensor tensor-parallel", "parallelize_module",
                         "DTensor's tensor parallelism cuts")

        def module():
            return ViTModule(params, models.get(model).init_state(), model, split=True)
        return TPTrainer(module(), module, devices[0], lr, rank, world)

    def _module(self, model, params):
        """A model's layered nn.Module where models.py writes one (LAYERED: the chapter's
        concise ResNet-18, whose BatchNorm2d SyncBatchNorm can replace; the ViT in
        PyTorch's own layers), else its functional form wrapped in an OpsModule."""
        state = models.get(model).init_state()
        if models.family(model) in LAYERED:
            return LAYERED[models.family(model)](model, params, state)
        return OpsModule(self.model_ops(model), params, state)

    def join(self, rank, timeout=None):
        # env://: MASTER_ADDR and MASTER_PORT as common.launch.launcher sets them, or under
        # torchrun the store its agent already serves (TORCHELASTIC_USE_AGENT_STORE)
        gpu = torch.cuda.device_count() > rank.local_rank
        kwargs = {"timeout": datetime.timedelta(seconds=timeout)} if timeout else {}
        dist.init_process_group("nccl" if gpu else "gloo", init_method="env://",
                                rank=rank.rank, world_size=rank.world_size, **kwargs)

    # how long a rank waits at the closing barrier for its peers (one still evaluating
    # on the test set, or a dead one on a failed run's way out)
    LEAVE_TIMEOUT = datetime.timedelta(seconds=60)

    def leave(self):
        if not dist.is_initialized():
            return
        if dist.get_backend() == "gloo":
            # every rank's collectives end before any rank tears its connections down: a
            # rank whose peer destroyed the group under its gloo threads aborted ("terminate
            # called without an active exception", exit -6; seen in 2 of 12 runs of 2 ranks
            # pinned to a core each)
            try:
                dist.monitored_barrier(timeout=self.LEAVE_TIMEOUT)
            except RuntimeError:
                pass                     # a peer is gone: nothing left to wait for
        dist.destroy_process_group()
