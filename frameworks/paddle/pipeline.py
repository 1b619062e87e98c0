"""Model mode in Paddle: the stage calls that common/pipeline.py's GPipe loop is
written on. A stage's input is a detached tensor with stop_gradient off;
paddle.autograd.backward(out, grad) takes the gradient of the output and leaves the
input's in X.grad. Paddle has one CPU place per process, so stages on a CPU run in
processes of their own, handing over with paddle.distributed.send/recv (gloo)."""
import numpy as np
import paddle
import paddle.distributed as dist

from .devices import place
from .models import loss_sum


class Pipeline:
    def stage_forward(self, replica, X, y=None, training=True):
        units = replica.stage.units
        if not training:
            with paddle.no_grad():
                return self.apply_stage(replica, X, False), None
        X = X.detach()
        X.stop_gradient = units[0] == 0
        out = self.apply_stage(replica, X, True)
        if y is not None:
            out = loss_sum(out, y)
        return out.detach(), (X, out)

    def stage_backward(self, replica, tape, grad, first):
        X, out = tape                 # gradients add up in p.grad; sgd clears them
        paddle.autograd.backward([out], None if grad is None else [grad])
        return None if X.stop_gradient else X.grad

    def send(self, x, dst):
        return dist.isend(x, dst)       # non-blocking: the stage goes on

    def recv(self, shape, src, device):
        x = paddle.to_tensor(np.empty(shape, np.float32), place=place(device))
        dist.recv(x, src)
        return x

    def gather_floats(self, values):
        mine = paddle.to_tensor(np.asarray(values, np.float64))
        out = []
        dist.all_gather(out, mine)
        return np.stack([t.numpy() for t in out])
