"""What every framework package supplies, defined once.

A backend is instantiated at import of its package (`frameworks.<name>.BACKEND`)
and touches no device until `setup` is called. Arrays in and out of the
contract are the framework's own; NumPy crosses it only in `array`, `to_numpy`,
the trainers and `forward_backward` (used by the oracle tests).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Callable, Sequence

import numpy as np


class NotApplicable(NotImplementedError):
    """The framework has no such thing; the message says why. Recorded as data."""


class Trainer(ABC):
    """One training run's state on its devices: a scratch replica set, or the
    framework's own data-parallel machinery (in a multi-process run, one rank)."""

    @abstractmethod
    def step(self, X: np.ndarray, y: np.ndarray) -> Any:
        """One SGD step on the full batch; returns a handle to the batch's mean loss
        without waiting for the device."""

    def train_epoch(self, X: np.ndarray, y: np.ndarray, order: np.ndarray,
                    on_step: Callable[[], None]) -> list:
        """One epoch: a step on X[idx], y[idx] for each row idx of `order`. Frameworks
        whose idiom owns the loop (Keras fit) override this; the caller times it whole."""
        handles = []
        for idx in order:
            handles.append(self.step(X[idx], y[idx]))
            on_step()
        return handles

    @abstractmethod
    def losses(self, handles: list) -> np.ndarray:
        """The mean loss of the full batch for each handle (may synchronise)."""

    @abstractmethod
    def predict(self, X: np.ndarray) -> np.ndarray:
        """Class ids predicted by the first replica."""

    @abstractmethod
    def replica_params(self) -> list[list[np.ndarray]]:
        """Every replica's parameters in the common layout (see common.lenet)."""

    @abstractmethod
    def load_params(self, params: Sequence[np.ndarray]) -> None:
        """Overwrite every replica's parameters (used after the warm-up)."""


class Backend(ABC):
    name: str
    # True where the framework has several distinct CPU devices in one process
    # (MXNet contexts, TensorFlow logical devices); else replicas share "cpu:0".
    distinct_cpu_devices: bool = False
    # True where native data parallelism runs one process per device.
    native_uses_processes: bool = False
    # Which native mechanism the framework uses, for the record.
    native_description: str = ""

    # --- process set-up ---
    @abstractmethod
    def setup(self, cpu_devices: int = 1, threads: int | None = None) -> None:
        """Configure the framework before first use: virtual CPU devices, threads."""

    @abstractmethod
    def version(self) -> str: ...

    # --- device API ---
    @abstractmethod
    def num_gpus(self) -> int: ...

    def try_gpu(self, i: int = 0) -> str:
        return f"gpu:{i}" if self.num_gpus() >= i + 1 else "cpu:0"

    def try_all_gpus(self) -> list[str]:
        return [f"gpu:{i}" for i in range(self.num_gpus())] or ["cpu:0"]

    def devices(self, n: int) -> list[str]:
        """n devices for data parallelism: GPUs when there are enough, else n CPU devices
        (distinct ones where the framework has them, else n replicas on cpu:0)."""
        if n < 1:
            raise ValueError(f"need at least one device, got {n}")
        gpus = self.num_gpus()
        if gpus:
            if n > gpus:
                raise ValueError(f"{n} devices asked for but {self.name} sees {gpus} GPUs")
            return [f"gpu:{i}" for i in range(n)]
        return [f"cpu:{i}" for i in range(n)] if self.distinct_cpu_devices else ["cpu:0"] * n

    @abstractmethod
    def array(self, value: np.ndarray, device: str) -> Any:
        """A mutable framework array holding `value` on `device` (what allreduce takes)."""

    def tensor(self, value: np.ndarray, device: str) -> Any:
        """Input data on `device` (need not be mutable)."""
        return self.array(value, device)

    @abstractmethod
    def to_device(self, x: Any, device: str) -> Any:
        """x on `device`; x itself when it already lives there."""

    @abstractmethod
    def device_of(self, x: Any) -> str: ...

    @abstractmethod
    def to_numpy(self, x: Any) -> np.ndarray: ...

    @abstractmethod
    def synchronize(self) -> None:
        """Wait for all queued work on every device."""

    def peak_memory_mb(self) -> float | None:
        """Peak device memory where the framework reports it (GPUs); None on the CPU."""
        return None

    # --- LeNet ---
    @abstractmethod
    def lenet(self, replica: list, X: Any) -> Any:
        """Logits of the chapter's LeNet with the parameters of `replica`."""

    @abstractmethod
    def forward_backward(self, params: Sequence[np.ndarray], X: np.ndarray, y: np.ndarray
                         ) -> tuple[np.ndarray, float, list[np.ndarray]]:
        """Logits, summed loss and the gradients of the sum, in the common layout,
        computed by this framework's LeNet on its first device."""

    # --- scratch mode: the chapter's data parallelism by hand ---
    @abstractmethod
    def get_params(self, params: Sequence[np.ndarray], device: str) -> list:
        """A replica of the parameters on `device`, with gradients attached."""

    @abstractmethod
    def read_params(self, replica: list) -> list[np.ndarray]:
        """A replica's parameters as NumPy arrays in the common layout."""

    @abstractmethod
    def write_params(self, replica: list, params: Sequence[np.ndarray]) -> None:
        """Overwrite a replica's parameters in place (its arrays keep their identity)."""

    @abstractmethod
    def allreduce(self, arrays: list) -> None:
        """Sum onto the first array's device, then write the sum into every array in place."""

    @abstractmethod
    def split_batch(self, X: Any, y: Any, devices: Sequence[str]) -> tuple[list, list]: ...

    @abstractmethod
    def train_batch(self, X: Any, y: Any, replicas: list, devices: Sequence[str], lr: float) -> Any:
        """Forward and backward per shard, allreduce of the gradients, SGD on every
        replica scaled by the full batch size. Returns the batch's mean loss (a handle)."""

    def scratch_trainer(self, params: Sequence[np.ndarray], devices: Sequence[str],
                        lr: float) -> Trainer:
        from .scratch import ScratchTrainer
        return ScratchTrainer(self, params, devices, lr)

    # --- native mode: the framework's own data parallelism ---
    @abstractmethod
    def native_trainer(self, params: Sequence[np.ndarray], devices: Sequence[str], lr: float,
                       rank: int = 0, world: int = 1) -> Trainer:
        """In-process trainer over `devices`; in a multi-process run, rank `rank` of
        `world` on `devices[0]`, its process group already joined by `spawn`."""

    def spawn(self, fn: Callable, nprocs: int, args: tuple) -> None:
        """Run fn(rank, *args) in nprocs processes joined into one process group."""
        raise NotApplicable(f"{self.name} runs native data parallelism in one process")
