"""The device-scopes model (common.experiments.scopes) in MXNet: gluon.rnn.LSTM on contexts."""
import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

from common.experiments import scopes

from .devices import context


class Scopes(scopes.Scopes):
    sharing = ("One gluon.rnn.LSTM (layout 'NTC', MXNet's fused RNN operator) whose "
               "Parameters are initialised on both branches' contexts: a gluon Parameter "
               "holds one copy per context, and MXNet runs each branch on the copy of its "
               "input's context. Shared means kept identical by hand: after the backward "
               "pass branch b's gradient is copied to branch a's context and added, the SGD "
               "update is made on branch a's copy (the master), and the updated weights are "
               "copied back to branch b's context. Gate order i, f, c, o as the common "
               "layout; the common bias is l0_i2h_bias, l0_h2h_bias is held at zero "
               "(grad_req 'null')")

    def build(self, params, placement):
        self.ctx = placement.translated(context)
        a, b, m = self.ctx["branch_a"], self.ctx["branch_b"], self.ctx["merge"]
        self.lstm = gluon.rnn.LSTM(scopes.H, layout="NTC", input_size=scopes.D)
        self.lstm.initialize(ctx=list(dict.fromkeys([a, b])))
        self.lstm.l0_h2h_bias.grad_req = "null"
        self.head = gluon.nn.Dense(1, in_units=2 * scopes.H)
        self.head.initialize(ctx=m)
        self.loss_fn = gluon.loss.SigmoidBinaryCrossEntropyLoss()
        self.lstm_params = [self.lstm.l0_i2h_weight, self.lstm.l0_h2h_weight, self.lstm.l0_i2h_bias]
        self.params = self.lstm_params + [self.head.weight, self.head.bias]
        self.load_params(params)

    def load_params(self, params):
        W_x, W_h, b, W, c = params
        for p, value in zip(self.params, (W_x.T, W_h.T, b, W.T, c)):
            p.set_data(mx.nd.array(value))                   # every context's copy
        self.lstm.l0_h2h_bias.set_data(mx.nd.zeros(4 * scopes.H))

    def read_params(self):
        W_x, W_h, b, W, c = (p.data(p.list_ctx()[0]).asnumpy() for p in self.params)
        return [W_x.T, W_h.T, b, W.T, c]

    def _forward(self, Xa, Xb, y):
        a, b, m = self.ctx["branch_a"], self.ctx["branch_b"], self.ctx["merge"]
        ha = self.lstm(mx.nd.array(Xa, ctx=a))[:, -1]        # runs on a's copy of the weights
        hb = self.lstm(mx.nd.array(Xb, ctx=b))[:, -1]        # runs on b's copy
        z = self.head(mx.nd.concat(ha.as_in_context(m), hb.as_in_context(m), dim=1)).reshape(-1)
        loss = self.loss_fn(z, mx.nd.array(y, ctx=m)).mean()
        return loss, z, ha, hb

    def _backward(self, Xa, Xb, y):
        with autograd.record():
            loss, z, _, _ = self._forward(Xa, Xb, y)
        loss.backward()
        a, b = self.ctx["branch_a"], self.ctx["branch_b"]
        if a != b:                                           # branch b's share of the gradient
            for p in self.lstm_params:
                p.grad(a)[:] += p.grad(b).copyto(a)
        return loss, z

    def _home(self, p):
        return p.list_ctx()[0]                               # branch a's context for the LSTM

    def forward_backward(self, Xa, Xb, y):
        loss, z = self._backward(Xa, Xb, y)
        grads = [p.grad(self._home(p)).asnumpy() for p in self.params]
        W_x, W_h, b, W, c = grads
        return mx.nd.sigmoid(z).asnumpy(), float(loss.asscalar()), [W_x.T, W_h.T, b, W.T, c]

    def step(self, Xa, Xb, y, lr):
        loss, _ = self._backward(Xa, Xb, y)
        for p in self.params:
            home = self._home(p)
            w = p.data(home)
            w[:] -= lr * p.grad(home)
            for other in p.list_ctx()[1:]:                   # branch b's copy follows a's
                w.copyto(p.data(other))
        return loss

    def parts(self, Xa, Xb):
        _, z, ha, hb = self._forward(Xa, Xb, np.zeros(len(Xa), np.float32))
        return ha, hb, z, self.lstm.l0_i2h_weight.data(self.ctx["branch_a"])
