"""The device API: neutral names <-> jax.Device. Several CPU devices are JAX's own
(jax_num_cpu_devices, set in `setup` before JAX starts its CPU client).

JAX arrays are immutable, and the chapter's allreduce writes the sum into every
device's array in place: `array` returns a Slot, a mutable box holding one
jax.Array, which allreduce writes into (rebinding a list entry instead would never
reach the replica: the bug of the Paddle edition's allreduce)."""
import os

import jax
import numpy as np

from common.facts import devices as dev


class Slot:
    """A mutable holder of one jax.Array: what the chapter writes 'in place'."""
    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    @property
    def shape(self):
        return self.value.shape

    def __array__(self, dtype=None, copy=None):
        return np.asarray(self.value, dtype)


def value(x):
    """The jax.Array of x (a Slot's content, or x itself)."""
    return x.value if isinstance(x, Slot) else x


def local_devices(kind: str) -> list:
    """This process's devices of `kind` ([] when JAX has no such platform here)."""
    try:
        return jax.local_devices(backend=kind)
    except RuntimeError:          # "Unknown backend gpu" on a machine without one
        return []


def jax_device(device: str):
    kind, i = dev.parse(device)
    found = local_devices(kind)
    if i >= len(found):
        raise ValueError(f"JAX has {len(found)} {kind} devices in this process, not {device!r}; "
                         "several CPU devices must be asked for in setup(cpu_devices=N) "
                         "before JAX starts")
    return found[i]


def neutral_name(d) -> str:
    kind = "cpu" if d.platform == "cpu" else "gpu"
    return dev.name(kind, local_devices(d.platform).index(d))


class Devices:
    distinct_cpu_devices = True   # jax_num_cpu_devices: distinct CPU devices in one process

    def setup(self, cpu_devices=1, threads=None):
        # read when JAX creates its CPU client, i.e. before the first array
        try:
            jax.config.update("jax_num_cpu_devices", max(1, cpu_devices))
        except RuntimeError:         # JAX has started: fine if it already has enough
            if len(local_devices("cpu")) < cpu_devices:
                raise ValueError(f"JAX started with {len(local_devices('cpu'))} CPU devices; "
                                 f"setup(cpu_devices={cpu_devices}) must come before any "
                                 "JAX operation") from None
        if threads:
            # XLA's CPU client sizes its pools from the cores it may use; Eigen's
            # intra-op pool follows this flag (read at client creation, like the above)
            flags = os.environ.get("XLA_FLAGS", "")
            if "intra_op_parallelism_threads" not in flags:
                os.environ["XLA_FLAGS"] = (f"{flags} --xla_cpu_multi_thread_eigen="
                                           f"{str(threads > 1).lower()} "
                                           f"intra_op_parallelism_threads={threads}").strip()

    def version(self):
        return jax.__version__

    def num_gpus(self):
        return len(local_devices("gpu"))

    def devices(self, n):
        names = super().devices(n)
        have = len(local_devices("cpu"))
        if names[0].startswith("cpu") and n > have:
            raise ValueError(f"{n} CPU devices asked for but JAX has {have}; "
                             f"call setup(cpu_devices={n}) before anything else")
        return names

    def array(self, value, device):
        return Slot(self.tensor(value, device))

    def tensor(self, value, device):
        return jax.device_put(np.asarray(value), jax_device(device))

    def to_device(self, x, device):
        d = jax_device(device)
        return x if value(x).devices() == {d} else jax.device_put(value(x), d)

    def device_of(self, x):
        return neutral_name(next(iter(value(x).devices())))

    def to_numpy(self, x):
        return np.asarray(value(x))

    def note(self, arrays, key="") -> None:
        """Remember the newest results of a step (per key: one replica): JAX
        dispatches asynchronously and has no call that waits for every device's queue,
        so synchronize waits for these (every earlier step's work is upstream of them)."""
        self.__dict__.setdefault("_pending", {})[key] = [value(a) for a in arrays]

    def synchronize(self):
        jax.block_until_ready(list(getattr(self, "_pending", {}).values()))

    def device_peak_memory_mb(self):
        return {neutral_name(d): (d.memory_stats() or {}).get("peak_bytes_in_use", 0) / 2**20
                for d in local_devices("gpu")}

    def gpu_model(self, device):
        return jax_device(device).device_kind

    def float32_math(self):
        # XLA's DEFAULT precision runs float32 products and convolutions as TF32 on GPUs
        # that have it; "highest"/"float32" asks for FP32
        precision = jax.config.jax_default_matmul_precision
        return ("tf32" if precision in (None, "default", "tensorfloat32") else
                "fp32" if precision in ("highest", "float32") else None)
