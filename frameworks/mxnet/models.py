"""The models of common/models as MXNet ndarray functions (common layout: NCHW, OIHW)."""
from mxnet import gluon, nd

from common.contract import ModelOps

loss = gluon.loss.SoftmaxCrossEntropyLoss()


class LeNet(ModelOps):
    def apply(self, params, state, X, training):
        h1 = nd.Pooling(nd.relu(nd.Convolution(data=X, weight=params[0], bias=params[1],
                                               kernel=(3, 3), num_filter=20)),
                        pool_type="avg", kernel=(2, 2), stride=(2, 2))
        h2 = nd.Pooling(nd.relu(nd.Convolution(data=h1, weight=params[2], bias=params[3],
                                               kernel=(5, 5), num_filter=50)),
                        pool_type="avg", kernel=(2, 2), stride=(2, 2))
        h3 = nd.relu(nd.dot(h2.reshape((h2.shape[0], -1)), params[4]) + params[5])
        return nd.dot(h3, params[6]) + params[7]


class Models:
    models = {"lenet": LeNet()}
