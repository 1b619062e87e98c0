"""Native mode: the whole training step under jax.jit over a Mesh of the devices, the
batch sharded along the mesh's "data" axis (NamedSharding(mesh, P("data"))), the
parameters replicated (P()). The program is written for the whole batch; XLA's SPMD
partitioner cuts it and inserts the all-reduce of the gradients. BatchNorm, as in
every framework's data parallelism, normalises each device's shard with its own
statistics and keeps each device's running statistics (state (devices, C), sharded
like the batch: models.batch_norm's groups); with sync_bn, the plain program's
statistics over the whole batch (the partitioner all-reduces them). Several
machines: the same code over a Mesh of every process's devices (jax.distributed,
joined in `join`), each process feeding only its own rows of the batch.

fsdp: each parameter whose first axis the devices divide sharded along "data" too. tp
(tensor parallelism): a mesh with one "model" axis, the batch whole on every device,
each parameter the model's TENSOR_SPLIT cuts laid out along "model" (Q, K, V and fc1
by columns, the output projection and fc2 by rows: Megatron's cut), the rest
replicated; XLA's partitioner inserts the all-reduces.

The arithmetic of one program over the global batch does not depend on where the batch
lies: copied to every device it gives the same numbers as split over them. So the
trainer says where it went (placement), read from the step's inputs and program."""
import functools
import os

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from common import models
from common.core.contract import NotApplicable, Trainer, held_figures
from common.facts.data import shard_bounds
from common.launch import slurm
from common.results import hlo

from .devices import jax_device, local_devices
from .models import sgd_update, training_step_fn

# Why a batch must divide evenly here (recorded as the run's reason when it does not)
EVEN_SHARDS = ("jax.jit over a Mesh shards the batch into equal parts, one per device; "
               "{batch} images do not divide over {k} devices (choose a batch size that does)")


class MeshTrainer(Trainer):
    numbers_show_placement = False

    def __init__(self, backend, model, params, devices, lr, execution, rank=0, world=1,
                 sync_bn=False, shard_params=False, tensor=False):
        self.backend, self.ops = backend, backend.model_ops(model)
        self.rank, self.world, self.compiled = rank, world, execution == "compiled"
        self._inputs = None
        # one process: the devices asked for; several: every process's devices
        mesh_devices = (jax.devices() if world > 1 else [jax_device(d) for d in devices])
        # tp: the mesh's axis is the model's ("model"); the batch whole on every device
        self.tensor = models.get(model).TENSOR_SPLIT if tensor else None
        self.mesh = Mesh(np.array(mesh_devices), ("model" if tensor else "data",))
        self.replicated = NamedSharding(self.mesh, P())
        self.sharded = self.replicated if tensor else NamedSharding(self.mesh, P("data"))
        self.groups = 1 if sync_bn else self.mesh.size
        # fsdp: each parameter whose first axis the devices divide sharded along it, as the
        # batch is (the rest replicated); XLA gathers them for the step and keeps the
        # updated ones sharded (the step's sharding constraint)
        self.shard_params = shard_params
        # one model over the devices (fsdp, tp): its parameters laid out once, kept so
        self.one_model = shard_params or tensor
        values = self.ops.to_framework(params)
        self.param_shardings = [self._param_sharding(np.shape(a), i) for i, a in enumerate(values)]
        self.params = self._place(values)
        self.state = self._per_replica(models.get(model).init_state())
        self.first = local_devices(mesh_devices[0].platform)[0] if world > 1 else mesh_devices[0]
        grad_fn = training_step_fn(self.ops.grouped(self.groups))

        def step(params, state, X, y):
            (loss, (_, state)), grads = grad_fn(params, state, X, y)
            params = sgd_update(params, grads, lr / X.shape[0])
            if self.one_model:
                params = [jax.lax.with_sharding_constraint(p, s)
                          for p, s in zip(params, self.param_shardings)]
            return params, state, loss / X.shape[0]
        # compiled: one XLA program per step, the old parameters' buffers reused
        # (donated); eager: the same calls op by op on the sharded arrays
        self._step = jax.jit(step, donate_argnums=(0, 1)) if execution == "compiled" else step
        self._logits = jax.jit(lambda p, s, X: self.ops.apply(p, list(s), X, False))

    def _replicate(self, arrays, shardings=None):
        return [jax.make_array_from_callback(np.shape(a), s or self.replicated,
                                             lambda idx, a=np.asarray(a): a[idx])
                for a, s in zip(arrays, shardings or [None] * len(arrays))]

    def _param_sharding(self, shape, i):
        if self.tensor:       # tp: the model's cut (TENSOR_SPLIT), its parts over "model"
            axis = self.tensor[i]
            return self.replicated if axis is None else NamedSharding(self.mesh, P(*[None] * axis, "model"))
        sharded = self.shard_params and len(shape) and shape[0] % self.mesh.size == 0
        return self.sharded if sharded else self.replicated

    def _place(self, params):
        return self._replicate(params, self.param_shardings)

    def shard_arrays(self) -> list[list[np.ndarray]]:
        """What each of this process's devices holds of every parameter (fsdp: its rows of
        the sharded ones, a whole copy of the replicated ones), in the mesh's order."""
        return self._per_device(self.params)

    def _per_replica(self, state):
        """BatchNorm's running statistics: one row per device, each on its device (one
        copy for all, replicated, with synchronised statistics)."""
        if self.groups == 1:
            return self._replicate(state)
        return [self._shard(np.tile(np.asarray(s)[None], (self.groups, 1))) for s in state]

    def _shard(self, a):
        if self.tensor:              # tp: every device runs the whole batch
            return self._replicate([a])[0]
        if a.shape[0] % self.mesh.size:
            raise NotApplicable(EVEN_SHARDS.format(batch=a.shape[0], k=self.mesh.size))
        if self.world == 1:          # each device takes its contiguous shard
            return jax.make_array_from_callback(a.shape, self.sharded, lambda idx: a[idx])
        # several processes: this process hands over only its own rows, as every engine's
        # rank takes its shard; the global batch is the rows of the processes in the mesh,
        # so a mesh of this process's devices alone would train on these rows alone
        lo, hi = shard_bounds(len(a), self.world)[self.rank]
        return jax.make_array_from_process_local_data(self.sharded, a[lo:hi])

    def step(self, X, y):
        X, y = self._shard(X), self._shard(y)
        self._inputs = (X, y)
        self.params, self.state, loss = self._step(self.params, self.state, X, y)
        self.backend.note(self.params, id(self))
        return loss

    def placement(self):
        """The mesh's devices and processes; each of this process's devices' rows of the
        last step's images; the FLOPs of the compiled step's program on one device (XLA's
        cost analysis of the partitioned program: the same program, from jit's cache)."""
        X = self._inputs[0]
        rows = {s.device: s.data.shape[0] for s in X.addressable_shards}
        flops = None
        if self.compiled:
            cost = self._compiled_step().cost_analysis()
            flops = (cost[0] if isinstance(cost, list) else cost)["flops"]
        return {"devices": self.mesh.size,
                "processes": len({d.process_index for d in self.mesh.devices.flat}),
                "rows": [rows[d] for d in self.mesh.devices.flat if d in rows],
                "flops": flops}

    def figures(self):
        """fsdp, tp: each device's bytes of the parameters between steps, the parameters'
        bytes, and from the compiled step's HLO (jit's cached program) the bytes its
        collectives carry, by kind, and where each update reads so, the gradient bytes
        each device updates its parameters with (the same program on every device): which
        collectives XLA chose, and so whether a gradient arrives whole, is the compiler's
        to say."""
        if not self.one_model:
            return {}
        whole = [int(np.prod(p.shape)) * p.dtype.itemsize for p in self.params]
        out = held_figures(self.shard_arrays(), whole, self.tensor or None)
        if self.compiled and self._inputs is not None:
            out.update(hlo.step_figures(self._compiled_step().as_text(), whole, len(out["shard_bytes"])))
        return out

    def _compiled_step(self):
        """The last step's program as XLA compiled it (the same program, from jit's cache)."""
        return self._step.lower(self.params, self.state, *self._inputs).compile()

    def losses(self, handles):
        # replicated: this process's copy (a multi-process array is not whole here)
        return np.array([float(h.addressable_data(0)) for h in handles])

    def logits(self, X):
        # the first device's replica, as every framework evaluates (fsdp: the parameters
        # gathered onto it)
        params = [jax.device_put(p, self.first) if self.one_model else self._local(p)
                  for p in self.params]
        state = [self._local(s) for s in self.state]
        if self.groups > 1:
            state = [s[0] for s in state]          # the first device's own statistics
        return np.asarray(self._logits(params, state, jax.device_put(X, self.first)))

    def _local(self, a):
        """The first device's copy (or row) of an array."""
        return next(s.data for s in a.addressable_shards if s.device == self.first)

    def _per_device(self, arrays, rows=False):
        """Each of this process's devices' copy of replicated arrays (rows: its row of
        per-replica arrays), as NumPy, in the mesh's order."""
        per = [{s.device: np.asarray(s.data)[0] if rows else np.asarray(s.data)
                for s in a.addressable_shards} for a in arrays]
        return [[p[d] for p in per] for d in self.mesh.devices.flat if d in per[0]]

    def replica_params(self):
        if self.one_model:           # one model, its parts over the devices: gathered
            return [self.ops.from_framework([np.asarray(p) for p in self.params])]
        return [self.ops.from_framework(r) for r in self._per_device(self.params)]

    def replica_state(self):
        if not self.state:
            return [[] for _ in self._per_device(self.params)]
        return self._per_device(self.state, rows=self.groups > 1)

    def load_params(self, params, state):
        self.params = self._place(self.ops.to_framework(params))
        self.state = self._per_replica(state)


class Native:
    def build_native_trainer(self, model, params, devices, lr, execution, rank, world, sync_bn):
        return MeshTrainer(self, model, params, devices, lr, execution, rank, world, sync_bn)

    def build_fsdp_trainer(self, model, params, devices, lr, execution, rank, world):
        return MeshTrainer(self, model, params, devices, lr, execution, rank, world,
                           shard_params=True)

    def build_tp_trainer(self, model, params, devices, lr, execution, rank, world):
        return MeshTrainer(self, model, params, devices, lr, execution, rank, world, tensor=True)

    # --- several machines: one process per node, jax.distributed (JAX has no launcher;
    # common.launch.nodes starts the processes with the master as coordinator, or under
    # Slurm, one per srun task, JAX finds its coordinator and place in srun's variables) ---
    def join(self, rank, timeout=None):
        # before anything touches a device: initialize must precede JAX's backends
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        _gloo_on_interface(os.environ.get("GLOO_SOCKET_IFNAME"))
        if os.environ.get(slurm.CLUSTER_ENV) == slurm.CLUSTER:
            jax.distributed.initialize(initialization_timeout=int(timeout or 300))
            # JAX's Slurm detection numbers the processes by srun's tasks: the suite's ranks
            # must be the same, or a node feeds another's rows (read from its state, not
            # jax.process_index(), which would start the backends before setup)
            from jax._src.distributed import global_state
            found = (global_state.process_id, global_state.num_processes)
            if found != (rank.rank, rank.world_size):
                raise RuntimeError(
                    f"jax.distributed's Slurm detection made this process {found[0]} of "
                    f"{found[1]}, the suite's rank is {rank.rank} of {rank.world_size}: run "
                    "one srun task per node")
            return None
        jax.distributed.initialize(f"{rank.master_addr}:{rank.master_port}",
                                   num_processes=rank.world_size, process_id=rank.rank,
                                   initialization_timeout=int(timeout or 300))
        return None

    def leave(self):
        jax.distributed.shutdown()


def _gloo_on_interface(interface: str | None) -> None:
    """JAX's CPU client makes its gloo collectives with no interface (xla_bridge calls
    make_gloo_tcp_collectives(distributed_client=...)), so gloo advertises the address of
    the hostname, loopback where /etc/hosts maps the hostname there (Debian's 127.0.1.1),
    and the other nodes never reach it; JAX 0.10 has no option for it, so the factory is
    given the interface that common.launch.nodes names (gloo's own variable)."""
    if not interface:
        return
    from jax._src import xla_bridge
    make = xla_bridge._jax.make_gloo_tcp_collectives
    xla_bridge._jax.make_gloo_tcp_collectives = functools.partial(make, interface=interface)
