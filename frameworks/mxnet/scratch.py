"""The chapter's data parallelism by hand, in MXNet: its primitives. The
train_batch that strings them together is common/scratch.py's."""
from mxnet import autograd, gluon, nd

from common.contract import Replica

from .devices import context
from .models import loss


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
        for p, v in zip(replica, self.model_ops(replica.model).to_framework(params)):
            p[:] = v
        for s, v in zip(replica.state, state or []):
            s[:] = v

    def allreduce(self, data):
        for i in range(1, len(data)):
            data[0][:] += data[i].copyto(data[0].context)
        for i in range(1, len(data)):
            data[0].copyto(data[i])          # copyto writes into data[i] in place

    def split_batch(self, X, y, devices):
        # even_split=False cuts as common.data.shard_bounds: the first shards one larger
        ctxs = [context(d) for d in devices]
        return (gluon.utils.split_and_load(X, ctxs, even_split=False),
                gluon.utils.split_and_load(y, ctxs, even_split=False))

    def shard_loss_and_grads(self, replica, X, y):
        with autograd.record():
            logits = self.model_ops(replica.model).apply(list(replica), replica.state, X, True)
            total = loss(logits, y).sum()
        total.backward()
        return total, logits

    def grads(self, replica):
        return [p.grad for p in replica]

    def sgd(self, replica, scale):
        for p in replica:
            nd.sgd_update(p, p.grad, lr=scale, out=p)   # grads are overwritten by backward

    def add(self, values, device):
        ctx = context(device)
        return nd.add_n(*[v.as_in_context(ctx) for v in values])
