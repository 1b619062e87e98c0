"""Native mode: a gluon Trainer over a list of contexts, gradients summed by a KVStore."""
import numpy as np
from mxnet import autograd, gluon, nd

from common.launch.launcher import RankInfo
from common.core.contract import NotApplicable, Trainer
from common import models
from common.facts.data import shard_bounds

from .devices import context
from .models import GLUON_MODELS, loss


# KVStore keys of the loss sums (gluon numbers the parameters from 0)
LOSS_KEY = 1_000_000


class GluonTrainer(Trainer):
    """gluon.Trainer over this process's contexts; given a `dist_sync` KVStore
    (several machines, common.launch.nodes), worker `rank` of `world` trains on its shard of
    every batch and the parameter servers sum the workers' gradients."""

    def __init__(self, model, params, state, devices, lr, sync_bn=False, execution="compiled",
                 kvstore=None, rank=0, world=1):
        build, slots, layout = GLUON_MODELS[models.family(model)]
        self.to_gluon, self.to_common = layout(model)
        self.ctxs = [context(d) for d in devices]
        self.sync_bn = sync_bn and len(devices) > 1
        self.net = build(model, len(devices) if self.sync_bn else 0)
        self.net.initialize(ctx=self.ctxs)
        self.params, self.state = slots(self.net, model)
        self.load_params(params, state)
        if execution == "compiled":
            self.net.hybridize(static_alloc=True, static_shape=True)
        gpu = self.ctxs[0].device_type == "gpu"
        # Only the trained parameters go to the Trainer: its KVStore, set up lazily in
        # the first step(), broadcasts every parameter it holds, and the running
        # statistics (grad_req 'null') came back from it as they were before that step
        # (measured: a 2-device run lost its first BatchNorm update). Each replica's
        # statistics follow its own shard, or the whole batch with SyncBatchNorm.
        trained = [p for p in self.net.collect_params().values() if p.grad_req != "null"]
        self.kv, self.rank, self.world, self._loss_keys = kvstore, rank, world, set()
        # with a dist_sync KVStore the servers only sum (update_on_kvstore=False: each
        # worker applies SGD to the summed gradients), so the same store also sums the
        # workers' losses
        self.trainer = (gluon.Trainer(trained, "sgd", {"learning_rate": lr}, kvstore=kvstore,
                                      update_on_kvstore=False) if kvstore else
                        gluon.Trainer(trained, "sgd", {"learning_rate": lr},
                                      kvstore="device" if gpu else "local"))

    def step(self, X, y):
        if self.sync_bn and len(X) % len(self.ctxs):
            # SyncBatchNorm averages the shards' means and sums of gradients as if the
            # shards were equal (measured: 9 images over 2 contexts give the mean of
            # the 5- and 4-image means), so only an even split is the full batch's BN
            raise NotApplicable(f"MXNet's SyncBatchNorm needs a batch that the {len(self.ctxs)} "
                                f"devices divide evenly, got {len(X)}")
        batch = len(X)
        if self.world > 1:              # this worker's shard of the batch
            lo, hi = shard_bounds(batch, self.world)[self.rank]
            X, y = X[lo:hi], y[lo:hi]
        Xs = gluon.utils.split_and_load(nd.array(X), self.ctxs, even_split=False)
        ys = gluon.utils.split_and_load(nd.array(y, dtype=np.float32), self.ctxs, even_split=False)
        with autograd.record():
            ls = [loss(self.net(a), b).sum() for a, b in zip(Xs, ys)]
        for l in ls:
            l.backward()
        self.trainer.step(batch)           # sums over contexts (and workers), divides by the batch
        return nd.add_n(*[l.as_in_context(self.ctxs[0]) for l in ls]) / batch

    def losses(self, handles):
        sums = nd.concat(*handles, dim=0) if handles else nd.zeros(0)
        if self.world > 1 and len(handles):
            # one push and pull per epoch: the servers sum every worker's shard losses
            key = LOSS_KEY + len(handles)      # an int, as gluon's parameter keys are
            if key not in self._loss_keys:
                self.kv.init(key, nd.zeros_like(sums))
                self._loss_keys.add(key)
            self.kv.push(key, sums)
            self.kv.pull(key, out=sums)
        return sums.asnumpy()

    def logits(self, X):
        return self.net(nd.array(X, ctx=self.ctxs[0])).asnumpy()

    def replica_params(self):
        return [self.to_common([p.data(c).asnumpy() for p in self.params]) for c in self.ctxs]

    def replica_state(self):
        return [[p.data(c).asnumpy() for p in self.state] for c in self.ctxs]

    def load_params(self, params, state):
        for p, v in zip(self.params, self.to_gluon([np.asarray(v) for v in params])):
            p.set_data(nd.array(v))
        for p, v in zip(self.state, state):
            p.set_data(nd.array(v))


class Native:
    # CPU contexts share one round-robin pool of temporary workspaces (GPUs have one
    # each); SyncBatchNorm blocks a worker at its barrier, and once an op of cpu(0) after
    # a barrier shares a workspace with an op of cpu(1) before it, the step deadlocks
    sync_bn_needs_gpu = ("gluon.contrib.nn.SyncBatchNorm over CPU contexts deadlocks: they share "
                         "one pool of temporary workspaces (MXNET_CPU_TEMP_COPY), and a context "
                         "blocked at a SyncBatchNorm barrier holds up the other's ops (MXNet 1.9.1, "
                         "measured: ResNet-18 on 2 CPU contexts hangs in its first step with "
                         "the default 4 copies, after 7 steps with 32, 13-14 with 128 or 256)")

    def build_native_trainer(self, model, params, devices, lr, execution, rank, world, sync_bn):
        if models.family(model) not in GLUON_MODELS:
            raise NotApplicable(f"mxnet native mode has no gluon {model} yet")
        return GluonTrainer(model, params, models.get(model).init_state(), devices, lr, sync_bn,
                            execution, self.kvstore if world > 1 else None, rank, world)

    # --- several machines: the dist_sync KVStore (common.launch.nodes starts the scheduler,
    # servers and workers); creating it registers this worker and waits for the rest ---
    def join(self, rank, timeout=None):
        from mxnet import kv
        self.kvstore = kv.create("dist_sync")
        # the scheduler numbers the workers in the order they registered
        return RankInfo(self.kvstore.rank, self.kvstore.num_workers, 0, 1, rank.master_addr,
                        rank.master_port)

    def leave(self):
        self.kvstore = None
