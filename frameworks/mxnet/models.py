"""The models of common/models as MXNet functions (common layout: NCHW, OIHW). Each
takes the operator namespace F (mx.nd, or mx.sym inside a hybridized block), so the
same code runs imperatively and as a cached graph; shapes come from common/models,
since a symbol has none."""
from mxnet import gluon, nd

from common.core.contract import ModelOps
from common.models import lenet as L, resnet18 as R

loss = gluon.loss.SoftmaxCrossEntropyLoss()


class LeNet(ModelOps):
    def apply(self, params, state, X, training, F=nd):
        return self.apply_units(params, state, X, (0, 2), training, F)

    def apply_units(self, params, state, X, units, training, F=nd):
        def conv(x, w, b):
            shape = L.PARAM_SHAPES[w]
            return F.Convolution(data=x, weight=params[w], bias=params[b], kernel=shape[2:],
                                 num_filter=shape[0])
        if units[0] == 0:            # the conv block
            h1 = F.Pooling(F.relu(conv(X, 0, 1)), pool_type="avg", kernel=(2, 2), stride=(2, 2))
            X = F.Pooling(F.relu(conv(h1, 2, 3)), pool_type="avg", kernel=(2, 2), stride=(2, 2))
        if units[1] == 2:            # the dense block
            h3 = F.relu(F.broadcast_add(F.dot(F.flatten(X), params[4]), params[5]))
            X = F.broadcast_add(F.dot(h3, params[6]), params[7])
        return X


class ResNet18(ModelOps):
    # MXNet 1.x updates the running statistics in the backward pass, with the biased
    # variance; momentum is the weight of the old value (0.9 = PyTorch's 0.1)
    unbiased_running_var = False
    running_stats_in_backward = True   # measured: a pipeline's M micro-batches update them last to first

    def apply(self, params, state, X, training, F=nd):
        return self.apply_units(params, state, X, (0, len(R.UNITS)), training, F)

    def apply_units(self, params, state, X, units, training, F=nd):
        def conv(x, c, stride, pad):
            shape = R.PARAM_SHAPES[c["weight"]]
            return F.Convolution(data=x, weight=params[c["weight"]], bias=params[c["bias"]],
                                 kernel=shape[2:], stride=(stride, stride), pad=(pad, pad),
                                 num_filter=shape[0])

        def bn(x, i):
            return F.BatchNorm(x, params[i["gamma"]], params[i["beta"]], state[i["mean"]],
                               state[i["var"]], eps=R.BN_EPS, momentum=1 - R.BN_MOMENTUM,
                               fix_gamma=False, use_global_stats=not training)

        h = R.walk(X, conv, bn, F.relu, units)
        if units[1] <= R.HEAD:
            return h
        return F.broadcast_add(F.dot(F.mean(h, axis=(2, 3)), params[R.FC["weight"]]),
                               params[R.FC["bias"]])


class Models:
    models = {"lenet": LeNet(), "resnet18": ResNet18()}
