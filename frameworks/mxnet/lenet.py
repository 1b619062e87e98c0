"""The chapter's LeNet as MXNet ndarray functions (common layout: NCHW, OIHW)."""
import numpy as np
from mxnet import autograd, gluon, nd

loss = gluon.loss.SoftmaxCrossEntropyLoss()


def lenet(X, params):
    h1 = nd.Pooling(nd.relu(nd.Convolution(data=X, weight=params[0], bias=params[1],
                                           kernel=(3, 3), num_filter=20)),
                    pool_type="avg", kernel=(2, 2), stride=(2, 2))
    h2 = nd.Pooling(nd.relu(nd.Convolution(data=h1, weight=params[2], bias=params[3],
                                           kernel=(5, 5), num_filter=50)),
                    pool_type="avg", kernel=(2, 2), stride=(2, 2))
    h3 = nd.relu(nd.dot(h2.reshape((h2.shape[0], -1)), params[4]) + params[5])
    return nd.dot(h3, params[6]) + params[7]


class LeNet:
    def lenet(self, replica, X):
        return lenet(X, replica)

    def forward_backward(self, params, X, y):
        ps = [nd.array(p) for p in params]
        for p in ps:
            p.attach_grad()
        with autograd.record():
            logits = lenet(nd.array(np.asarray(X, np.float32)), ps)
            total = loss(logits, nd.array(y)).sum()
        total.backward()
        return logits.asnumpy(), float(total.asscalar()), [p.grad.asnumpy() for p in ps]
