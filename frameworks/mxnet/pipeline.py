"""Model mode in MXNet: the stage calls that common/core/pipeline.py's GPipe loop is
written on. Each stage's parameters live on its own context (mx.cpu(i) are distinct
contexts, mx.gpu(i) GPUs) with grad_req 'add', so their gradients add up over the
micro-batches; a stage's input gets attach_grad, and out.backward(grad) takes the
gradient of the output and leaves the input's in X.grad."""
from mxnet import autograd

from .models import loss


class Pipeline:
    def stage_replica(self, params, state, device, model, stage):
        replica = super().stage_replica(params, state, device, model, stage)
        for p in replica:
            p.attach_grad(grad_req="add")
        return replica

    def stage_forward(self, replica, X, y=None, training=True):
        units = replica.stage.units
        if not training:
            return self.apply_stage(replica, X, False), None
        if units[0] > 0:
            X.attach_grad()
        with autograd.record():
            out = self.apply_stage(replica, X, True)
            if y is not None:
                out = loss(out, y).sum()
        return out.detach(), (X, out)

    def stage_backward(self, replica, tape, grad, first):
        X, out = tape
        if first:                     # grad_req 'add': start the step's sums from zero
            for p in replica:
                p.grad[:] = 0
        # retain_graph: the micro-batches' graphs share BatchNorm's running statistics,
        # and freeing the first graph broke the next backward (measured, ResNet-18 with
        # M = 2: "The any container is empty requested=...AGInfo"); each graph goes
        # with its tape at the end of the step
        out.backward(grad, retain_graph=True)
        return X.grad if replica.stage.units[0] > 0 else None
