"""The device-scopes model (common.experiments.scopes) in PaddlePaddle: paddle.nn.LSTM."""
from dataclasses import asdict

import numpy as np
import paddle
import paddle.nn.functional as F
from paddle import nn

from common.experiments import scopes

from common.facts import devices as dev


def _made_on(device, make):
    """make() with `device` as Paddle's current device, where a layer's parameters are
    created (Layer.to fails on nn.LSTM's flattened-weight buffer here)."""
    before = paddle.get_device()
    paddle.set_device("cpu" if dev.parse(device)[0] == "cpu" else device)
    try:
        return make()
    finally:
        paddle.set_device(before)


def _lstm(device):
    return _made_on(device, lambda: nn.LSTM(scopes.D, scopes.H))   # batch-major


def _trained(lstm):
    return [lstm.weight_ih_l0, lstm.weight_hh_l0, lstm.bias_ih_l0]


class Scopes(scopes.Scopes):
    sharing = ("One paddle.nn.LSTM whose parameters live on branch a's place. Paddle has no "
               "functional call of a layer on other weights, so where branch b's place differs "
               "it runs a replica nn.LSTM there, written from branch a's parameters before "
               "every step, whose gradient is copied to branch a's place and added before the "
               "SGD update. Paddle has one CPU place per process, so on a CPU both branches "
               "are that place and the one LSTM runs both (no replica, nothing copied). Gate "
               "order i, f, g, o as the common layout; the common bias is bias_ih_l0, "
               "bias_hh_l0 is held at zero (its gradient, bias_ih's, is not applied: "
               "stop_gradient on it makes the fused rnn backward fail)")
    # True: run branch b on a replica even where it shares branch a's place (the tests
    # use it to exercise the replica's code on a CPU); None: only where the places differ
    replicate = None

    def build(self, params, placement):
        self.dev = asdict(placement)
        self.lstm = _lstm(placement.branch_a)
        self.replica = None
        if self.replicate or placement.branch_b != placement.branch_a:
            self.replica = _lstm(placement.branch_b)
        self.head = _made_on(placement.merge, lambda: nn.Linear(2 * scopes.H, 1))
        self.load_params(params)

    def _mine(self):
        return _trained(self.lstm) + [self.head.weight, self.head.bias]

    def load_params(self, params):
        W_x, W_h, b, W, c = params
        for p, value in zip(self._mine(), (W_x.T, W_h.T, b, W, c)):   # Linear's weight is (in, out)
            p.set_value(np.ascontiguousarray(value))
        self.lstm.bias_hh_l0.set_value(np.zeros(4 * scopes.H, np.float32))
        self._sync_replica()

    def _sync_replica(self):
        if self.replica is not None:
            for mine, theirs in zip(self.lstm.parameters(), self.replica.parameters()):
                theirs.set_value(self.backend.to_device(mine.detach(), self.dev["branch_b"]))

    def read_params(self):
        W_x, W_h, b, W, c = (p.numpy() for p in self._mine())
        return [W_x.T, W_h.T, b, W, c]

    def _tensor(self, x, part):
        return self.backend.array(np.ascontiguousarray(x), self.dev[part])

    def _forward(self, Xa, Xb, y):
        _, (ha, _) = self.lstm(self._tensor(Xa, "branch_a"))
        _, (hb, _) = (self.replica or self.lstm)(self._tensor(Xb, "branch_b"))
        to_merge = lambda h: self.backend.to_device(h[-1], self.dev["merge"])   # noqa: E731
        z = self.head(paddle.concat([to_merge(ha), to_merge(hb)], axis=1))[:, 0]
        loss = F.binary_cross_entropy_with_logits(z, self._tensor(y, "merge"))
        return loss, z, ha, hb

    def _backward(self, Xa, Xb, y):
        for layer in (self.lstm, self.replica, self.head):   # (p.grad is cleared in place)
            if layer is not None:
                layer.clear_gradients()
        loss, z, _, _ = self._forward(Xa, Xb, y)
        loss.backward()
        return loss, z, self._with_replica_grads([p.grad for p in self._mine()])

    def _with_replica_grads(self, grads):
        """Branch b's share of the shared weights' gradient, carried to branch a's place
        and added (where branch b runs a replica)."""
        if self.replica is not None:
            for i, theirs in enumerate(_trained(self.replica)):
                grads[i] = grads[i] + self.backend.to_device(theirs.grad, self.dev["branch_a"])
        return grads

    def forward_backward(self, Xa, Xb, y):
        loss, z, grads = self._backward(Xa, Xb, y)
        W_x, W_h, b, W, c = (g.numpy() for g in grads)
        return F.sigmoid(z).numpy(), float(loss), [W_x.T, W_h.T, b, W, c]

    def step(self, Xa, Xb, y, lr):
        loss, _, grads = self._backward(Xa, Xb, y)
        with paddle.no_grad():
            for p, g in zip(self._mine(), grads):
                p.set_value(p - lr * g)
        self._sync_replica()
        return loss

    def parts(self, Xa, Xb):
        with paddle.no_grad():
            _, z, ha, hb = self._forward(Xa, Xb, np.zeros(len(Xa), np.float32))
        return ha, hb, z, self.lstm.weight_ih_l0
