"""The chapter's data parallelism by hand, in Paddle: its primitives. The
train_batch that strings them together is common/core/scratch.py's."""
import paddle
from paddle.profiler import RecordEvent

from common.core.contract import Replica
from common.facts.data import shard_bounds
from common.core.scratch import training_forward

from .devices import place
from .models import loss_sum


class Scratch:
    def get_params(self, params, device, model="lenet", state=None):
        return Replica([paddle.to_tensor(p, place=place(device), stop_gradient=False)
                        for p in self.model_ops(model).to_framework(params)], model, device,
                       [paddle.to_tensor(s, place=place(device)) for s in (state or [])])

    def read_params(self, replica):
        return self.model_ops(replica.model).from_framework([p.numpy().copy() for p in replica])

    def read_state(self, replica):
        return [s.numpy().copy() for s in replica.state]

    def write_params(self, replica, params, state=None):
        for p, v in zip(replica, self.model_ops(replica.model).to_framework(params)):
            p.set_value(v)
        for s, v in zip(replica.state, state or []):
            s.set_value(v)

    def allreduce(self, data):
        # paddle.assign(..., output=t) writes into t: every device's tensor gets the sum.
        # RecordEvent names the loop in paddle.profiler's trace (frameworks/paddle/profile.py)
        with paddle.no_grad(), RecordEvent("allreduce"):
            for i in range(1, len(data)):
                paddle.assign(data[0] + self.to_device(data[i], self.device_of(data[0])),
                              output=data[0])
            for i in range(1, len(data)):
                paddle.assign(self.to_device(data[0], self.device_of(data[i])), output=data[i])

    def split_batch(self, X, y, devices):
        bounds = shard_bounds(X.shape[0], len(devices))
        return ([self.to_device(X[lo:hi], d) for (lo, hi), d in zip(bounds, devices)],
                [self.to_device(y[lo:hi], d) for (lo, hi), d in zip(bounds, devices)])

    def shard_loss_and_grads(self, replica, X, y):
        # compiled: paddle.jit.to_static, the forward as a static program (its backward
        # is the program's)
        loss, logits = training_forward(
            self, replica.model, replica.execution, loss_sum,
            lambda f: paddle.jit.to_static(f, full_graph=True))(list(replica), replica.state, X, y)
        loss.backward()
        return loss.detach(), logits.detach()

    def grads(self, replica):
        return [p.grad for p in replica]

    def sgd(self, replica, scale):
        with paddle.no_grad(), RecordEvent("sgd"):
            for p in replica:
                p.subtract_(p.grad * scale)
                p.clear_gradient(set_to_zero=False)

    def add(self, values, device):
        return paddle.add_n([self.to_device(v, device) for v in values])

    # sharded mode's primitives (common/core/sharded.py: all_gather, reduce_scatter)
    def rows(self, x, lo, hi):
        return x.detach()[lo:hi].clone()

    def concat(self, parts, device):
        return paddle.concat(parts, axis=0)

    def assign(self, x, value):
        with paddle.no_grad():
            paddle.assign(value, output=x)

    def clear_grads(self, replica):
        for p in replica:
            p.clear_gradient(set_to_zero=False)      # backward adds into a gradient that is there

    # tensor mode's primitives (common/core/tensor.py): a piece's own autograd graph
    def record(self, fn, inputs, device, consts=()):
        leaves = [x.detach() for x in inputs]
        for x in leaves:
            x.stop_gradient = False
        out = fn(*leaves, *consts)
        return out.detach(), (out, leaves)

    def backprop(self, tape, grad):
        out, leaves = tape
        return list(paddle.grad([out], leaves, None if grad is None else [grad]))
