"""The models of common/models as MXNet ndarray functions (common layout: NCHW, OIHW)."""
from mxnet import gluon, nd

from common.contract import ModelOps
from common.models import resnet18 as R

loss = gluon.loss.SoftmaxCrossEntropyLoss()


class LeNet(ModelOps):
    def apply(self, params, state, X, training):
        return self.apply_units(params, state, X, (0, 2), training)

    def apply_units(self, params, state, X, units, training):
        if units[0] == 0:            # the conv block
            h1 = nd.Pooling(nd.relu(nd.Convolution(data=X, weight=params[0], bias=params[1],
                                                   kernel=(3, 3), num_filter=20)),
                            pool_type="avg", kernel=(2, 2), stride=(2, 2))
            X = nd.Pooling(nd.relu(nd.Convolution(data=h1, weight=params[2], bias=params[3],
                                                  kernel=(5, 5), num_filter=50)),
                           pool_type="avg", kernel=(2, 2), stride=(2, 2))
        if units[1] == 2:            # the dense block
            h3 = nd.relu(nd.dot(X.reshape((X.shape[0], -1)), params[4]) + params[5])
            X = nd.dot(h3, params[6]) + params[7]
        return X


class ResNet18(ModelOps):
    # MXNet 1.x updates the running statistics in the backward pass, with the biased
    # variance; momentum is the weight of the old value (0.9 = PyTorch's 0.1)
    unbiased_running_var = False
    running_stats_in_backward = True   # measured: a pipeline's M micro-batches update them last to first

    def apply(self, params, state, X, training):
        return self.apply_units(params, state, X, (0, len(R.UNITS)), training)

    def apply_units(self, params, state, X, units, training):
        def conv(x, c, stride, pad):
            W = params[c["weight"]]
            return nd.Convolution(data=x, weight=W, bias=params[c["bias"]], kernel=W.shape[2:],
                                  stride=(stride, stride), pad=(pad, pad), num_filter=W.shape[0])

        def bn(x, i):
            return nd.BatchNorm(x, params[i["gamma"]], params[i["beta"]], state[i["mean"]],
                                state[i["var"]], eps=R.BN_EPS, momentum=1 - R.BN_MOMENTUM,
                                fix_gamma=False, use_global_stats=not training)

        h = R.walk(X, conv, bn, nd.relu, units)
        if units[1] <= R.HEAD:
            return h
        return nd.dot(h.mean(axis=(2, 3)), params[R.FC["weight"]]) + params[R.FC["bias"]]


class Models:
    models = {"lenet": LeNet(), "resnet18": ResNet18()}
