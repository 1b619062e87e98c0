"""The device API: neutral names <-> "/CPU:i", "/GPU:i". Several CPU devices are
logical devices, configured in `setup` before TensorFlow initialises."""
import numpy as np
import tensorflow as tf

from common.facts import devices as dev


def tf_device(device: str) -> str:
    kind, i = dev.parse(device)
    return f"/{kind.upper()}:{i}"


class Devices:
    distinct_cpu_devices = True   # logical CPU devices

    def setup(self, cpu_devices=1, threads=None):
        try:
            if threads:
                tf.config.threading.set_intra_op_parallelism_threads(threads)
                tf.config.threading.set_inter_op_parallelism_threads(threads)
            for gpu in tf.config.list_physical_devices("GPU"):
                tf.config.experimental.set_memory_growth(gpu, True)
            if cpu_devices > 1:
                cpu = tf.config.list_physical_devices("CPU")[0]
                tf.config.set_logical_device_configuration(
                    cpu, [tf.config.LogicalDeviceConfiguration()] * cpu_devices)
        except RuntimeError:   # TensorFlow has started: fine if it already has what is asked
            have = len(tf.config.list_logical_devices("CPU"))
            pool = tf.config.threading.get_intra_op_parallelism_threads()
            if have < cpu_devices or (threads and pool != threads):
                raise ValueError(f"TensorFlow started with {have} CPU devices and {pool} threads; "
                                 f"setup(cpu_devices={cpu_devices}, threads={threads}) must come "
                                 "before any TensorFlow operation") from None

    def version(self):
        return tf.__version__

    def apply_setting(self, name):
        # Grappler rewrites the graphs tf.function builds (oneDNN's bfloat16 kernels where
        # numerically safe, float32 kept for the rest): eager ops are left as they are
        if name == "onednn-bf16":
            tf.config.optimizer.set_experimental_options(
                {"auto_mixed_precision_onednn_bfloat16": True})
        else:
            super().apply_setting(name)

    def num_gpus(self):
        return len(tf.config.list_physical_devices("GPU"))

    def devices(self, n):
        names = super().devices(n)
        have = len(tf.config.list_logical_devices("CPU"))
        if names[0].startswith("cpu") and n > have:
            raise ValueError(f"{n} CPU devices asked for but TensorFlow has {have}; "
                             f"call setup(cpu_devices={n}) before anything else")
        return names

    def array(self, value, device):
        with tf.device(tf_device(device)):
            return tf.Variable(np.asarray(value))

    def tensor(self, value, device):
        with tf.device(tf_device(device)):
            return tf.identity(tf.convert_to_tensor(np.asarray(value)))

    def to_device(self, x, device):
        if self.device_of(x) == device:
            return x
        with tf.device(tf_device(device)):
            return tf.identity(x)

    def device_of(self, x):
        spec = tf.DeviceSpec.from_string(x.device)
        return dev.name(spec.device_type.lower(), spec.device_index or 0)

    def to_numpy(self, x):
        return x.numpy()

    def synchronize(self):
        if getattr(self, "cluster_strategy", None) is None:
            tf.test.experimental.sync_devices()
        else:
            # sync_devices would reach into the other workers' devices, which this worker
            # does not drive ("Haven't set up remote eager worker"): wait for its own ops
            from tensorflow.python.eager import context
            context.async_wait()

    def device_peak_memory_mb(self):
        return {dev.name("gpu", tf.DeviceSpec.from_string(g.name).device_index or 0):
                tf.config.experimental.get_memory_info(g.name)["peak"] / 2**20
                for g in tf.config.list_logical_devices("GPU")}

    def gpu_model(self, device):
        gpus = tf.config.list_physical_devices("GPU")
        _, i = dev.parse(device)
        if i >= len(gpus):
            return None
        return tf.config.experimental.get_device_details(gpus[i]).get("device_name")

    def float32_math(self):
        return "tf32" if tf.config.experimental.is_tensor_float_32_execution_enabled() else "fp32"
