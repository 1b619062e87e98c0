"""The run record: its schema, the environment it was measured in, atomic files."""
from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import shutil
import subprocess
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path


STATUSES = ("ok", "failed", "not-installed", "not-applicable")
RECORD_KEYS = (
    "framework", "framework_version", "mode", "devices", "device_names", "device_kind",
    "dataset", "epochs", "batch_size", "lr", "seed", "threads", "sec_per_epoch",
    "samples_per_sec", "test_accuracy", "train_loss", "step_losses", "peak_memory_mb",
    "status", "error", "env",
)
STEP_LOSSES_KEPT = 50


@dataclass
class RunConfig:
    framework: str
    mode: str                      # "scratch" or "native"
    devices: int
    dataset: str = "fashion-mnist"
    data_dir: str | None = None
    epochs: int = 1
    batch_size: int = 256
    lr: float = 0.2
    seed: int = 0
    threads: int = 2
    steps_per_epoch: int | None = None
    warmup_steps: int = 2

    def to_dict(self) -> dict:
        return asdict(self)


def new_record(cfg: RunConfig) -> dict:
    """A record with every key, filled from the config; the run fills in the rest."""
    record = dict.fromkeys(RECORD_KEYS)
    record.update(framework=cfg.framework, mode=cfg.mode, devices=cfg.devices,
                  dataset=cfg.dataset, epochs=cfg.epochs, batch_size=cfg.batch_size,
                  lr=cfg.lr, seed=cfg.seed, threads=cfg.threads, status="failed",
                  sec_per_epoch=[], train_loss=[], step_losses=[], device_names=[])
    return record


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _gpu_model() -> str | None:
    if not shutil.which("nvidia-smi"):
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return ", ".join(out.splitlines()) or None


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def env_info() -> dict:
    """Where a figure was measured: read without importing any framework."""
    dists = ["numpy", "torch", "mxnet", "tensorflow", "keras", "paddlepaddle", "paddlepaddle-gpu"]
    return {
        "python": platform.python_version(),
        "os": platform.platform(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "gpu_model": _gpu_model(),
        "libraries": {d: v for d in dists if (v := _version(d))},
    }


def write_atomic(path: str | os.PathLike, data) -> None:
    """Write JSON so that a reader sees the old file or the new one, never half of one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".tmp", delete=False) as f:
        json.dump(data, f, indent=1)
        tmp = f.name
    os.replace(tmp, path)


def record_filename(record: dict) -> str:
    return f"{record['framework']}-{record['mode']}-{record['devices']}dev.json"


def load_records(directory: str | os.PathLike) -> list[dict]:
    """Every record in a results folder, in the order compare runs them."""
    from .registry import NAMES
    records = [json.loads(p.read_text()) for p in Path(directory).glob("*dev.json")]
    order = {n: i for i, n in enumerate(NAMES)}
    return sorted(records, key=lambda r: (order.get(r["framework"], len(order)),
                                          r["mode"] != "scratch", r["devices"]))


