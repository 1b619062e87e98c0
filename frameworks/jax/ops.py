"""JAX's calls for the device experiments (common.experiments.device_experiments).

JAX dispatches asynchronously on every platform and has no call that waits for a
device's whole queue: the backend's synchronize waits for the arrays noted with
Backend.note, so every call here that enqueues work notes its result, the newest
per device and kind of work (a device runs its computations in order: measured on
the CPU, an x + 1 enqueued after a 2048^3 product on the same device is ready only
with it, one on another device at once)."""
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from common.experiments import ops

from .devices import jax_device, local_devices, neutral_name, value

try:                                   # jax >= 0.7; jax.experimental's goes away later
    _shard_map = jax.shard_map
except AttributeError:                 # pragma: no cover - older jax
    from jax.experimental.shard_map import shard_map as _shard_map


def _psum_over(mesh):
    """x's block on each device -> the sum of every device's block, on every device."""
    return jax.jit(_shard_map(lambda x: jax.lax.psum(x, "d"), mesh=mesh,
                              in_specs=P("d"), out_specs=P("d")))


class Ops(ops.Ops):
    native_allreduce_description = (
        "jax.lax.psum under shard_map, jitted over a Mesh of the devices (one process): the "
        "devices' arrays joined without a copy into one array sharded over the mesh "
        "(jax.make_array_from_single_device_arrays), one XLA all-reduce, the sum left in "
        "every device's shard; where both arrays are on one device (one GPU), which a mesh "
        "cannot hold twice, one jitted add on it instead")

    def __init__(self, backend):
        super().__init__(backend)
        self._last = {}

    def _issued(self, y, work="compute"):
        """Note y, the newest result of `work` on its device, for synchronize."""
        self._last[(y.sharding, work)] = y
        self.backend.note(self._last.values())
        return y

    def visible_devices(self, kind):
        return [neutral_name(d) for d in local_devices(kind)]

    # Committed inputs (device_put onto a device) keep each result on their device.
    def matmul(self, a, b):
        return self._issued(jnp.matmul(a, b))

    def norm(self, x):
        return self._issued(jnp.linalg.norm(x))

    def stack(self, scalars):
        return self._issued(jnp.stack(list(scalars)))

    def item(self, x):
        return float(x)

    def add_one(self, x):
        return self._issued(x + 1)

    # JAX itself has no parameter file (orbax is a separate package, not installed
    # here): jax.numpy.save / jax.numpy.load, NumPy's .npy format that JAX re-exports,
    # one array after another in one file.
    def save(self, arrays, path):
        with open(path, "wb") as f:
            for a in arrays:
                jnp.save(f, self._host_copy(a))

    def load(self, path, device, like):
        d = jax_device(device)
        with open(path, "rb") as f, jax.default_device(d):
            # jnp.load puts each array on the default device; device_put commits it there
            loaded = [jax.device_put(jnp.load(f), d) for _ in like]
        for x in loaded:
            self._issued(x, "transfer")
        return loaded

    # JAX stages host-to-device copies itself: it has no call to page-lock a NumPy array
    # (the "pinned_host" memory kind is a placement of jax.Arrays, a second copy)
    def host_to_device(self, host, device):
        return self._issued(jax.device_put(host, jax_device(device)), "transfer")

    def _host_copy(self, x):
        """x in host memory, copied from its device now. A jax.Array keeps the NumPy value
        it was once read as (np.asarray / jax.device_get of one 64 MB array: 46 ms, then
        0.1 ms, measured), so repeated reads would time a cache; a device_put onto the
        CPU device copies every time. An array on a CPU device is read as it is."""
        x = value(x)
        if next(iter(x.devices())).platform != "cpu":
            x = jax.device_put(x, local_devices("cpu")[0])
        return np.asarray(x)

    def device_to_host(self, x):
        return self._host_copy(x)

    def products_and_copies(self, a, b, n, overlap):
        if next(iter(a.devices())).platform == "cpu":
            raise ops.NotApplicable("no copy to overlap: the arrays already live on the host")
        if not overlap:
            return lambda: [np.asarray(self.matmul(a, b)) for _ in range(n)]

        def run():
            out = []
            for _ in range(n):
                c = self.matmul(a, b)
                # starts the copy once c is computed and returns at once (PJRT copies on
                # its own device-to-host stream): it overlaps the next products
                c.copy_to_host_async()
                out.append(c)
            return jax.device_get(out)          # waits for the copies
        return run

    def collective(self, arrays):
        xs = [value(a) for a in arrays]
        devices = [next(iter(x.devices())) for x in xs]
        if len(set(devices)) < len(devices):
            # one device (one GPU): a mesh cannot hold it twice (the description says so)
            total = jax.jit(lambda *v: sum(v[1:], v[0]))

            def run_one():
                s = self._issued(total(*xs))
                return [s] * len(xs)
            return run_one
        n = xs[0].shape[0]
        mesh = Mesh(np.array(devices), ("d",))
        joined = jax.make_array_from_single_device_arrays(
            (len(xs) * n,), NamedSharding(mesh, P("d")), xs)
        psum = _psum_over(mesh)

        def run():
            out = self._issued(psum(joined))
            by_device = {s.device: s.data for s in out.addressable_shards}
            return [by_device[d] for d in devices]
        return run
