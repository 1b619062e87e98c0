"""The chapter's data parallelism by hand, in MXNet: its primitives. The
train_batch that strings them together is common/core/scratch.py's."""
from mxnet import autograd, gluon, nd
from mxnet.gluon import HybridBlock

from common import models
from common.core.contract import Replica

from .devices import context
from .models import loss
from .profile import annotate


class ShardStep(HybridBlock):
    """One shard's training forward (summed loss and logits) as a HybridBlock that
    takes the replica's arrays as inputs: hybridized, the chapter's per-shard step runs
    as one cached graph while the allreduce stays the chapter's, by hand. BatchNorm's
    running statistics, inputs the graph mutates, are updated in place."""

    def __init__(self, ops, n_params):
        super().__init__()
        self.ops, self.n_params = ops, n_params

    def hybrid_forward(self, F, X, y, *arrays):
        params, state = list(arrays[:self.n_params]), list(arrays[self.n_params:])
        logits = self.ops.apply(params, state, X, True, F)
        return F.sum(loss(logits, y)), logits


class Scratch:
    def get_params(self, params, device, model="lenet", state=None):
        ctx = context(device)
        new = [nd.array(p, ctx=ctx) for p in self.model_ops(model).to_framework(params)]
        for p in new:
            p.attach_grad()
        return Replica(new, model, device, [nd.array(s, ctx=ctx) for s in (state or [])])

    def read_params(self, replica):
        return self.model_ops(replica.model).from_framework([p.asnumpy() for p in replica])

    def read_state(self, replica):
        return [s.asnumpy() for s in replica.state]

    def write_params(self, replica, params, state=None):
        # copyto, not p[:] = v: after an evaluation forward oneDNN may hold an array in
        # its own layout, which slice assignment refuses ("can't generate TBlob for
        # MKLDNN data"); copyto writes the values in whatever layout the array has
        for p, v in zip(replica, self.model_ops(replica.model).to_framework(params)):
            nd.array(v, ctx=p.context, dtype=p.dtype).copyto(p)
        for s, v in zip(replica.state, state or []):
            nd.array(v, ctx=s.context, dtype=s.dtype).copyto(s)

    def allreduce(self, data):
        # named in mxnet.profiler's trace (profile.py RULES: communication); the engine
        # runs the copies and sums asynchronously: the annotation holds their dispatch
        with annotate("allreduce"):
            for i in range(1, len(data)):
                data[0][:] += data[i].copyto(data[0].context)
            for i in range(1, len(data)):
                data[0].copyto(data[i])          # copyto writes into data[i] in place

    def split_batch(self, X, y, devices):
        # even_split=False cuts as common.facts.data.shard_bounds: the first shards one larger
        ctxs = [context(d) for d in devices]
        return (gluon.utils.split_and_load(X, ctxs, even_split=False),
                gluon.utils.split_and_load(y, ctxs, even_split=False))

    def shard_loss_and_grads(self, replica, X, y):
        step = self._shard_step(replica.model, replica.execution)
        with autograd.record():
            total, logits = step(X, y, *replica, *replica.state)
        total.backward()
        return total, logits

    def _shard_step(self, model, execution):
        """The per-shard forward, as it is (eager) or hybridized (compiled): one block
        per model, shared by every replica and context."""
        self.check_execution(execution)
        cache = self.__dict__.setdefault("_steps", {})
        if (model, execution) not in cache:
            ops = self.model_ops(model)
            step = ShardStep(ops, len(models.get(model).PARAM_NAMES))
            if execution == "compiled":
                step.hybridize(static_alloc=True, static_shape=True)
            cache[model, execution] = step
        return cache[model, execution]

    def grads(self, replica):
        return [p.grad for p in replica]

    def sgd(self, replica, scale):
        with annotate("sgd"):                # profile.py RULES: optimizer update
            for p in replica:
                nd.sgd_update(p, p.grad, lr=scale, out=p)   # grads are overwritten by backward

    def add(self, values, device):
        ctx = context(device)
        return nd.add_n(*[v.as_in_context(ctx) for v in values])

    # sharded mode's primitives (common/core/sharded.py: all_gather, reduce_scatter)
    def rows(self, x, lo, hi):
        return x[lo:hi].copy()

    def concat(self, parts, device):
        return nd.concat(*parts, dim=0)

    def assign(self, x, value):
        x[:] = value               # backward overwrites the gradients: nothing to clear

    # tensor mode's primitives (common/core/tensor.py): a piece recorded by autograd.
    # Each piece's result is waited for: with both devices' pieces in flight at once (2 CPU
    # contexts, OMP_NUM_THREADS=2, the default ViT at batch 256) the threaded engine never
    # finished them (seen here in training and in evaluation; NaiveEngine, or these waits,
    # run)
    def piece(self, fn):
        def waited(*args):
            out = fn(*args)
            out.wait_to_read()
            return out
        return waited

    def record(self, fn, inputs, device, consts=()):
        leaves = [x.copy() for x in inputs]
        for x in leaves:
            x.attach_grad()
        with autograd.record():
            out = self.piece(fn)(*leaves, *consts)
        return out.detach(), (out, leaves)

    def backprop(self, tape, grad):
        out, leaves = tape
        out.backward(grad)
        for x in leaves:
            x.grad.wait_to_read()
        return [x.grad for x in leaves]
