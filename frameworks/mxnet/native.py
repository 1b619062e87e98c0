"""Native mode: a gluon Trainer over a list of contexts, gradients summed by a KVStore."""
import numpy as np
from mxnet import autograd, gluon, nd
from mxnet.gluon import nn

from common.contract import NotApplicable, Trainer, predict_in_batches

from .devices import context
from .models import loss


def gluon_lenet():
    net = nn.HybridSequential()
    net.add(nn.Conv2D(20, kernel_size=3, activation="relu", in_channels=1),
            nn.AvgPool2D(pool_size=2, strides=2),
            nn.Conv2D(50, kernel_size=5, activation="relu", in_channels=20),
            nn.AvgPool2D(pool_size=2, strides=2),
            nn.Dense(128, activation="relu", in_units=800),
            nn.Dense(10, in_units=128))
    return net


def _to_gluon(params):
    # gluon's Dense stores its weight as (out, in): transpose the 2-D weights
    return [p.T if p.ndim == 2 else p for p in params]


# model name -> (a gluon network, parameters in the common layout -> gluon's, and back)
GLUON_MODELS = {"lenet": (gluon_lenet, _to_gluon, _to_gluon)}


class GluonTrainer(Trainer):
    def __init__(self, model, params, devices, lr):
        build, self.to_gluon, self.from_gluon = GLUON_MODELS[model]
        self.ctxs = [context(d) for d in devices]
        self.net = build()
        self.net.initialize(ctx=self.ctxs)
        self.params = [p for p in self.net.collect_params().values() if p.grad_req != "null"]
        self.state = [p for p in self.net.collect_params().values() if p.grad_req == "null"]
        self.load_params(params, [])
        self.net.hybridize(static_alloc=True, static_shape=True)
        gpu = self.ctxs[0].device_type == "gpu"
        self.trainer = gluon.Trainer(self.net.collect_params(), "sgd", {"learning_rate": lr},
                                     kvstore="device" if gpu else "local")

    def step(self, X, y):
        Xs = gluon.utils.split_and_load(nd.array(X), self.ctxs, even_split=False)
        ys = gluon.utils.split_and_load(nd.array(y, dtype=np.float32), self.ctxs, even_split=False)
        with autograd.record():
            ls = [loss(self.net(a), b).sum() for a, b in zip(Xs, ys)]
        for l in ls:
            l.backward()
        self.trainer.step(len(X))          # sums over contexts, divides by the batch
        return nd.add_n(*[l.as_in_context(self.ctxs[0]) for l in ls]) / len(X)

    def losses(self, handles):
        return nd.concat(*handles, dim=0).asnumpy() if handles else np.zeros(0)

    def predict(self, X):
        return predict_in_batches(
            lambda x: self.net(nd.array(x, ctx=self.ctxs[0])).asnumpy(), X)

    def replica_params(self):
        return [self.from_gluon([p.data(c).asnumpy() for p in self.params]) for c in self.ctxs]

    def replica_state(self):
        return [[p.data(c).asnumpy() for p in self.state] for c in self.ctxs]

    def load_params(self, params, state):
        for p, v in zip(self.params, self.to_gluon(list(params))):
            p.set_data(nd.array(v))
        for p, v in zip(self.state, state):
            p.set_data(nd.array(v))


class Native:
    def native_trainer(self, model, params, devices, lr, rank=0, world=1, sync_bn=False):
        if model not in GLUON_MODELS:
            raise NotApplicable(f"mxnet native mode has no gluon {model} yet")
        return GluonTrainer(model, params, devices, lr)
