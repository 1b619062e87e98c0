"""The primitives the device experiments (common.experiments.device_experiments) are written on.

Every framework package has one file, `frameworks/<name>/ops.py`, defining
`class Ops(common.experiments.ops.Ops)` with only that framework's calls. `load(name)` imports
it on demand and instantiates it; an Ops class that misses a method fails there,
loudly (TypeError naming the methods), not at the fifth call. A primitive that a
framework does not have raises `NotApplicable` with the reason, which the
experiment records as data.

The device API that already exists (`array`, `tensor`, `to_numpy`, `synchronize`,
`allreduce` -- the chapter's by-hand one) is the framework's Backend
(common.core.contract), reached here as `self.backend`; `Ops.spawn` starts the
rank processes of a framework whose all-reduce runs a process per device.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Callable, Sequence

import numpy as np

from common.facts import registry
from common.core.contract import Backend, NotApplicable
from common.launch import launcher

__all__ = ["Ops", "NotApplicable", "load"]


class Ops(ABC):
    # How the framework's own all-reduce is done, for the record.
    native_allreduce_description: str = ""
    # 1: over the devices of one process; >1: one process per device, started by
    # `spawn` (each rank's `collective` then gets a one-element list).
    native_allreduce_processes: int = 1

    def __init__(self, backend: Backend):
        self.backend = backend
        self.name = backend.name

    # --- set-up and devices ---
    def setup(self, cpu_devices: int, threads: int | None) -> None:
        """Configure the framework before first use (virtual CPU devices, threads)."""
        self.backend.setup(cpu_devices=cpu_devices, threads=threads)

    @abstractmethod
    def visible_devices(self, kind: str) -> list[str]:
        """Every device of `kind` ("cpu" or "gpu") this process can place work on,
        e.g. ["cpu:0", "cpu:1"] with two virtual CPU devices, [] with no GPU."""

    # --- arithmetic (results stay on the inputs' device, nothing is waited for) ---
    @abstractmethod
    def matmul(self, a: Any, b: Any) -> Any: ...

    @abstractmethod
    def norm(self, x: Any) -> Any:
        """The Frobenius norm of x as a 0-d array on x's device."""

    @abstractmethod
    def stack(self, scalars: Sequence[Any]) -> Any:
        """0-d arrays -> one 1-d array on their device."""

    @abstractmethod
    def item(self, x: Any) -> float:
        """A 0-d array's value on the host (this waits for it)."""

    @abstractmethod
    def add_one(self, x: Any) -> Any:
        """y = x + 1, a new array on x's device."""

    # --- parameters to a file and back ---
    @abstractmethod
    def save(self, arrays: Sequence[Any], path: str) -> None:
        """Write device arrays to `path` with the framework's own serialisation."""

    @abstractmethod
    def load(self, path: str, device: str, like: Sequence[Any]) -> list:
        """Read what `save` wrote onto `device` (`like`: the saved arrays, for shapes)."""

    # --- copies between host and device (GPUs) ---
    @abstractmethod
    def host_to_device(self, host: np.ndarray, device: str) -> Any:
        """Copy a host array to `device` (from pinned memory where the framework has it)."""

    @abstractmethod
    def device_to_host(self, x: Any) -> Any:
        """Copy x to the host (a blocking copy)."""

    @abstractmethod
    def products_and_copies(self, a: Any, b: Any, n: int, overlap: bool) -> Callable[[], list]:
        """A function that computes n products a @ b on a's device and copies each
        result to the host, returning the host copies; with overlap=False each copy
        waits for its product and blocks the next one, with overlap=True copies are
        non-blocking (into pinned memory, on a second stream) so they overlap the
        next products. Raise NotApplicable where the framework cannot overlap."""

    def concurrency_hazard(self, devices: Sequence[str]) -> str | None:
        """Why work must not be run on these devices at once (a known hang), or None."""
        return None

    # --- all-reduce ---
    def allreduce_by_hand(self, arrays: list) -> None:
        """The chapter's allreduce: sum onto the first device, copy back in place."""
        self.backend.allreduce(arrays)

    @abstractmethod
    def collective(self, arrays: list) -> Callable[[], list]:
        """Prepare the framework's native all-reduce over `arrays` (one per device,
        or this rank's one array when native_allreduce_processes > 1) and return a
        function that runs it once and returns the summed array on every device.
        Set-up (a KVStore key, a strategy) happens here, untimed."""

    def spawn(self, fn: Callable, nprocs: int, args: tuple, threads: int = 1) -> None:
        """Run fn(rank, world, *args) in nprocs processes joined into one group.

        The one place that starts ranks: common.launch.launcher hands each rank its rank,
        world size and master address in the environment, and Backend.join joins it."""
        if self.native_allreduce_processes <= 1:
            raise NotApplicable(f"{self.name}'s native all-reduce runs in one process")
        launcher.launch(_launched_rank, nprocs, (self.name, threads, fn, args))

    def rank_device(self, rank: int, world: int) -> str:
        """The device of one rank of a multi-process run."""
        return f"gpu:{rank}" if self.backend.num_gpus() >= world else "cpu:0"


def _launched_rank(framework: str, threads: int, fn: Callable, args: tuple) -> None:
    """A rank started by common.launch.launcher: set up, join the group, run fn, leave."""
    rank = launcher.RankInfo.from_env()
    backend = registry.get(framework)
    backend.setup(cpu_devices=1, threads=threads)
    backend.join(rank)
    try:
        fn(rank.rank, rank.world_size, *args)
    finally:
        backend.leave()


def load(name: str) -> Ops:
    """`frameworks.<name>.ops.Ops` bound to the framework's backend, imported on demand."""
    return registry.plugin(name, "ops", Ops)
