"""The chapter's data parallelism written by hand, in Paddle."""
import paddle

from .devices import place
from .lenet import lenet, loss_sum


class Scratch:
    def get_params(self, params, device):
        return [paddle.to_tensor(p, place=place(device), stop_gradient=False) for p in params]

    def read_params(self, replica):
        return [p.numpy().copy() for p in replica]

    def write_params(self, replica, params):
        for p, v in zip(replica, params):
            p.set_value(v)

    def allreduce(self, data):
        # paddle.assign(..., output=t) writes into t: every device's tensor gets the sum
        with paddle.no_grad():
            for i in range(1, len(data)):
                paddle.assign(data[0] + self.to_device(data[i], self.device_of(data[0])),
                              output=data[0])
            for i in range(1, len(data)):
                paddle.assign(self.to_device(data[0], self.device_of(data[i])), output=data[i])

    def split_batch(self, X, y, devices):
        n = len(devices)
        return ([self.to_device(s, d) for s, d in zip(paddle.chunk(X, n), devices)],
                [self.to_device(s, d) for s, d in zip(paddle.chunk(y, n), devices)])

    def train_batch(self, X, y, replicas, devices, lr):
        X_shards, y_shards = self.split_batch(X, y, devices)
        ls = [loss_sum(lenet(Xs, W), ys) for Xs, ys, W in zip(X_shards, y_shards, replicas)]
        for l in ls:
            l.backward()
        for i in range(len(replicas[0])):
            self.allreduce([r[i].grad for r in replicas])
        batch = X.shape[0]
        with paddle.no_grad():
            for r in replicas:
                for p in r:
                    p.subtract_(p.grad * (lr / batch))
                    p.clear_gradient(set_to_zero=False)
            d0 = self.device_of(replicas[0][0])
            return paddle.add_n([self.to_device(l.detach(), d0) for l in ls]) / batch
