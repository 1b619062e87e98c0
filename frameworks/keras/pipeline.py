"""Model mode in Keras 3 (TensorFlow backend): each stage is a Keras sub-model of the
model's units (keras_lenet / keras_resnet18 with units), built and run under
keras.device on its device (TensorFlow's logical CPU devices here) and updated by a
keras.optimizers.SGD of its own. Keras 3's own model parallelism
(keras.distribution.ModelParallel) serves only the JAX backend. The backward pass
through a stage is TensorFlow's (Keras's arrays are TensorFlow tensors there):
tape.gradient with the output's gradient, as in frameworks/tensorflow/pipeline.py. On
JAX and torch the stages' backward is not written (the facts' `model` gap): the stage
calls raise NotApplicable."""
import keras
import numpy as np

from common import models
from common.core.contract import NotApplicable, Replica
from common.facts import registry

from .backends import current


class NoPipeline:
    def stage_replica(self, params, state, device, model, stage):
        raise NotApplicable(registry.gap(self.name, "model"))


if current.tf is not None:       # a stage's backward is written with GradientTape
    tf = current.tf

    from frameworks.tensorflow.models import loss_sum
    from frameworks.tensorflow.pipeline import Pipeline as TensorFlowPipeline
else:
    TensorFlowPipeline = NoPipeline


class TensorFlowStages(TensorFlowPipeline):
    def stage_replica(self, params, state, device, model, stage):
        with keras.device(device):
            net, (param_vars, state_vars) = self.keras_model(model, params, state, stage=stage)
            grads = [tf.Variable(tf.zeros_like(v.value), trainable=False) for v in param_vars]
        replica = Replica(param_vars, model, device, state_vars, grads)
        replica.net, replica.stage = net, stage
        replica.opt = keras.optimizers.SGD(learning_rate=1.0)   # scaled per step in stage_sgd
        return replica

    def read_stage(self, replica):
        ops, stage = self.model_ops(replica.model), replica.stage
        # the common layout by the model's own conversion, which converts a whole list:
        # the stage's entries among zeros
        whole = ops.to_framework([np.zeros(s, np.float32) for s in models.get(replica.model).PARAM_SHAPES])
        for i, v in zip(stage.params, replica):
            whole[i] = np.asarray(v.numpy())
        whole = ops.from_framework(whole)
        return [whole[i] for i in stage.params], [np.asarray(s.numpy()) for s in replica.state]

    def write_stage(self, replica, params, state):
        self.set_weights(replica.model, (list(replica), list(replica.state)), params, state,
                         replica.stage)

    def stage_forward(self, replica, X, y=None, training=True):
        with keras.device(replica.device):
            if replica.stage.units[0] == 0:
                X = tf.transpose(X, [0, 2, 3, 1])       # Keras's images are NHWC
            if not training:
                return replica.net(X, training=False), None
            with tf.GradientTape() as tape:
                tape.watch(X)
                out = replica.net(X, training=True)
                if y is not None:
                    out = loss_sum(out, y)
        return out, (tape, X, out)

    def stage_sgd(self, replica, scale):
        with keras.device(replica.device):
            replica.opt.learning_rate = scale
            replica.opt.apply_gradients(zip([g.read_value() for g in replica.grads], list(replica)))


# on JAX and torch, the class above has no TensorFlow under it: the gap instead
Pipeline = NoPipeline if current.tf is None else TensorFlowStages
