"""The device API: neutral names <-> mx.cpu(i) / mx.gpu(i) contexts."""
import mxnet as mx
import numpy as np

from common.facts import devices as dev


def context(device: str) -> mx.Context:
    kind, i = dev.parse(device)
    return mx.cpu(i) if kind == "cpu" else mx.gpu(i)


class Devices:
    distinct_cpu_devices = True   # mx.cpu(0), mx.cpu(1), ... are distinct contexts

    def setup(self, cpu_devices=1, threads=None):
        pass   # MXNet reads OMP_NUM_THREADS at import; benchmarks.workers.run sets it

    def version(self):
        return mx.__version__

    def num_gpus(self):
        return mx.context.num_gpus()

    def array(self, value, device):
        value = np.asarray(value)
        # labels travel as float32, as gluon's losses expect
        dtype = np.float32 if value.dtype.kind in "iu" else value.dtype
        return mx.nd.array(value, ctx=context(device), dtype=dtype)

    def to_device(self, x, device):
        return x.as_in_context(context(device))   # x itself when already there

    def device_of(self, x):
        c = x.context
        return dev.name("cpu" if c.device_type.startswith("cpu") else "gpu", c.device_id)

    def to_numpy(self, x):
        return x.asnumpy()

    def synchronize(self):
        mx.nd.waitall()

    def device_peak_memory_mb(self):
        return {}     # MXNet 1.9 has no peak-allocation counter; the record uses RSS
