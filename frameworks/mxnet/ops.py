"""MXNet's calls for the device experiments (common.experiments.device_experiments). MXNet's engine
is asynchronous on the CPU too: every call returns at once, mx.nd.waitall (the
backend's synchronize) or asnumpy waits."""
import itertools
import os

import mxnet as mx

from common.experiments import ops

from .devices import context


class Ops(ops.Ops):
    native_allreduce_description = "KVStore 'local': push of every device's array, pull onto every device"

    def __init__(self, backend):
        super().__init__(backend)
        self._cpu_devices = 1
        self._keys = itertools.count()
        self._kv = None

    def setup(self, cpu_devices, threads):
        super().setup(cpu_devices, threads)
        self._cpu_devices = cpu_devices     # mx.cpu(i) are distinct contexts for any i

    def visible_devices(self, kind):
        if kind == "cpu":
            return [f"cpu:{i}" for i in range(self._cpu_devices)]
        return [f"gpu:{i}" for i in range(mx.context.num_gpus())]

    def concurrency_hazard(self, devices):
        # Reproduced here: with OMP_NUM_THREADS=2, mx.nd.dot of 1024x1024 on cpu(0) and
        # cpu(1) at once never returns (two engine threads each entering the OpenMP
        # OpenBLAS that MXNet 1.9.1 bundles); with 1 thread, or 64x64, it does.
        cpus = {d for d in devices if d.startswith("cpu")}
        threads = int(os.environ.get("OMP_NUM_THREADS", "0") or 0)
        if len(cpus) > 1 and threads != 1:
            return (f"MXNet 1.9.1 hangs running dot on two cpu contexts at once with "
                    f"OMP_NUM_THREADS={threads or 'unset'} (its OpenMP OpenBLAS entered from two "
                    "engine threads; reproduced with 1024x1024); run with --threads 1 to measure it")
        return None

    def matmul(self, a, b):
        return mx.nd.dot(a, b)

    def norm(self, x):
        return mx.nd.norm(x)

    def stack(self, scalars):
        return mx.nd.concat(*[s.reshape((1,)) for s in scalars], dim=0)

    def item(self, x):
        return float(x.asscalar())

    def add_one(self, x):
        return x + 1

    def save(self, arrays, path):
        mx.nd.save(path, list(arrays))

    def load(self, path, device, like):
        return [x.as_in_context(context(device)) for x in mx.nd.load(path)]

    def host_to_device(self, host, device):
        return mx.nd.array(host, ctx=context(device), dtype=host.dtype)

    def device_to_host(self, x):
        return x.asnumpy()

    def products_and_copies(self, a, b, n, overlap):
        if a.context.device_type != "gpu":
            raise ops.NotApplicable("no copy to overlap: the arrays already live on the host")
        if not overlap:
            return lambda: [mx.nd.dot(a, b).asnumpy() for _ in range(n)]
        # copyto pinned host memory is queued in the engine: it overlaps the next dot
        return lambda: [mx.nd.dot(a, b).copyto(mx.cpu_pinned(0)) for _ in range(n)]

    def collective(self, arrays):
        if self._kv is None:
            self._kv = mx.kv.create("local")
        kv, key = self._kv, next(self._keys)
        kv.init(key, mx.nd.zeros(arrays[0].shape, ctx=arrays[0].context, dtype=arrays[0].dtype))

        def run():
            kv.push(key, arrays)            # the store sums the devices' arrays
            kv.pull(key, out=arrays)        # and writes the sum onto every device
            return arrays
        return run
