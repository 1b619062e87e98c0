"""TensorFlow's calls for the device experiments (common.experiments.device_experiments)."""
import tensorflow as tf

from common.experiments import ops

from .devices import tf_device


def _logical(kind):
    return [f"{kind}:{i}" for i in range(len(tf.config.list_logical_devices(kind.upper())))]


class Ops(ops.Ops):
    native_allreduce_description = ("tf.distribute.MirroredStrategy over the devices, "
                                    "strategy.extended.reduce_to(SUM) onto every device "
                                    "(its default cross-device ops)")

    def __init__(self, backend):
        super().__init__(backend)
        self._strategies = {}

    def visible_devices(self, kind):
        return _logical(kind)

    # Eager ops run on the default device unless told: place each on its input's.
    def matmul(self, a, b):
        with tf.device(a.device):
            return tf.linalg.matmul(a, b)

    def norm(self, x):
        with tf.device(x.device):
            return tf.norm(x)

    def stack(self, scalars):
        with tf.device(scalars[0].device):
            return tf.stack(scalars)

    def item(self, x):
        return float(x.numpy())

    def add_one(self, x):
        with tf.device(x.device):
            return x + 1

    def save(self, arrays, path):
        tf.train.Checkpoint(params=list(arrays)).write(path)

    def load(self, path, device, like):
        with tf.device(tf_device(device)):
            params = [tf.Variable(tf.zeros(v.shape, v.dtype)) for v in like]
        tf.train.Checkpoint(params=params).read(path).assert_consumed()
        return params

    def host_to_device(self, host, device):
        with tf.device(tf_device(device)):
            return tf.identity(tf.constant(host))

    def device_to_host(self, x):
        return x.numpy()

    def products_and_copies(self, a, b, n, overlap):
        if overlap:
            raise ops.NotApplicable("TensorFlow's eager API has no non-blocking device-to-host "
                                    "copy or user stream to overlap it with")
        return lambda: [self.matmul(a, b).numpy() for _ in range(n)]

    def strategy(self, devices):
        key = tuple(devices)
        if key not in self._strategies:
            self._strategies[key] = tf.distribute.MirroredStrategy(list(key))
        return self._strategies[key]

    def collective(self, arrays):
        strategy = self.strategy([a.device for a in arrays])
        values = strategy.experimental_distribute_values_from_function(
            lambda ctx: arrays[ctx.replica_id_in_sync_group])

        def run():
            total = strategy.extended.reduce_to(tf.distribute.ReduceOp.SUM, values,
                                                destinations=values)
            return list(strategy.experimental_local_results(total))
        return run
