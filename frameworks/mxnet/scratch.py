"""The chapter's data parallelism written by hand, in MXNet."""
from mxnet import autograd, gluon, nd

from .devices import context
from .lenet import lenet, loss


class Scratch:
    def get_params(self, params, device):
        new = [nd.array(p, ctx=context(device)) for p in params]
        for p in new:
            p.attach_grad()
        return new

    def read_params(self, replica):
        return [p.asnumpy() for p in replica]

    def write_params(self, replica, params):
        for p, v in zip(replica, params):
            p[:] = v

    def allreduce(self, data):
        for i in range(1, len(data)):
            data[0][:] += data[i].copyto(data[0].context)
        for i in range(1, len(data)):
            data[0].copyto(data[i])          # copyto writes into data[i] in place

    def split_batch(self, X, y, devices):
        ctxs = [context(d) for d in devices]
        return (gluon.utils.split_and_load(X, ctxs, even_split=False),
                gluon.utils.split_and_load(y, ctxs, even_split=False))

    def train_batch(self, X, y, replicas, devices, lr):
        X_shards, y_shards = self.split_batch(X, y, devices)
        with autograd.record():
            ls = [loss(lenet(Xs, W), ys).sum() for Xs, ys, W in zip(X_shards, y_shards, replicas)]
        for l in ls:
            l.backward()
        for i in range(len(replicas[0])):
            self.allreduce([r[i].grad for r in replicas])
        batch = X.shape[0]
        for r in replicas:
            for p in r:
                nd.sgd_update(p, p.grad, lr=lr, rescale_grad=1.0 / batch, out=p)
        ctx0 = replicas[0][0].context
        return nd.add_n(*[l.as_in_context(ctx0) for l in ls]) / batch
