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

from . import modes, registry

STATUSES = ("ok", "failed", "diverged", "interrupted", "not-installed", "not-applicable")
FAILED = ("failed", "diverged")     # statuses that make compare exit 1
# Every key a run record has (a test checks that runs write these and no others).
RECORD_KEYS = (
    # what was run
    "framework", "framework_version", "model", "mode", "devices", "device_names", "device_kind",
    "processes", "native_mechanism", "execution", "execution_mechanism", "dataset", "epochs",
    "batch_size", "batch_per_device", "scaling", "lr", "sync_bn", "seed", "threads", "cores_per_device", "cpu_affinity",
    "eval_samples",
    # what it measured
    "warmup_sec", "compile_sec", "estimated_sec_per_epoch", "sec_per_epoch", "steps_per_epoch",
    "samples_per_sec", "eval_sec", "test_accuracy", "test_accuracy_per_epoch", "train_loss",
    "step_losses", "peak_memory_mb", "peak_memory_source", "diverged_step", "last_finite_loss",
    "target_accuracy", "epochs_to_target", "sec_to_target",
    # model mode (the pipeline, common/pipeline.py); None in the other modes but micro_batches
    "micro_batches", "stages", "stage_devices", "stage_sec", "handover_sec",
    "bytes_between_stages", "bubble", "bubble_gpipe",
    # several machines (common.nodes): node count, this machine's node, how the nodes
    # were started, the processes over all nodes, MXNet's parameter servers, and each
    # simulated node's sec/epoch (--launcher local)
    "nodes", "node_rank", "launcher", "cluster_launcher", "world_size", "servers",
    "node_sec_per_epoch",
    # how it ended, and where
    "status", "error", "traceback", "env",
)
STEP_LOSSES_KEPT = 50
# Keys that benchmarks.compare adds to a worker's record: the figures of every
# repeat (--repeat), and how many were planned.
COMPARE_KEYS = ("repeats", "repeat_planned")
# the figures of one repeat, kept for each in a record's "repeats"
REPEAT_KEYS = ("status", "error", "sec_per_epoch", "steps_per_epoch", "samples_per_sec",
               "warmup_sec", "compile_sec", "test_accuracy", "test_accuracy_per_epoch",
               "train_loss", "peak_memory_mb", "diverged_step", "last_finite_loss", "epochs_to_target",
               "sec_to_target")


@dataclass
class RunConfig:
    framework: str
    mode: str                      # a name in common.modes.MODES
    devices: int
    # a name in common.modes.EXECUTIONS; None: what the mode runs by default
    execution: str | None = None
    model: str = "lenet"           # a name in common.models.NAMES
    dataset: str = "fashion-mnist"
    data_dir: str | None = None
    epochs: int = 1
    batch_size: int = 256          # the global batch, over all devices
    lr: float = 0.2
    # weak scaling: batch_size = batch_per_device x devices (lr grown alike by compare);
    # None: a fixed global batch whatever the device count
    batch_per_device: int | None = None
    sync_bn: bool = False          # synchronised BatchNorm across replicas (native mode)
    seed: int = 0
    threads: int = 2
    # honest CPU scaling: each device (a process, or a process's share) pinned to its own
    # this many cores, with as many threads; None: every run shares all the cores
    cores_per_device: int | None = None
    steps_per_epoch: int | None = None
    # record the training time and epochs until test accuracy first reaches this
    target_accuracy: float | None = None
    eval_samples: int | None = None    # cap on the test images evaluated (None: all)
    warmup_steps: int = 2
    micro_batches: int = 1         # model mode: the batch flows through the stages in M parts
    # several machines (common.nodes): `devices` is then per node. launcher "cluster":
    # this machine is node `node_rank` and `master` (HOST:PORT) is node 0's address;
    # "local": every node is simulated here. node_hosts: every node's address, in node
    # order (TensorFlow's TF_CONFIG lists every worker)
    nodes: int = 1
    node_rank: int = 0
    master: str | None = None
    launcher: str = "cluster"
    node_hosts: list[str] | None = None
    join_timeout: float = 300.0

    def to_dict(self) -> dict:
        return asdict(self)


def _default_execution(framework: str, mode: str) -> str | None:
    """The execution a mode runs when none is asked for; None for a framework or mode
    the registry does not know (a record from elsewhere)."""
    if framework in registry.FRAMEWORKS and mode in modes.MODES:
        return modes.execution(framework, mode, None)
    return None


def new_record(cfg: RunConfig) -> dict:
    """A record with every key, filled from the config; the run fills in the rest."""
    record = dict.fromkeys(RECORD_KEYS)
    record.update(framework=cfg.framework, model=cfg.model, mode=cfg.mode, devices=cfg.devices,
                  execution=cfg.execution or _default_execution(cfg.framework, cfg.mode),
                  dataset=cfg.dataset, epochs=cfg.epochs, batch_size=cfg.batch_size,
                  batch_per_device=cfg.batch_per_device,
                  scaling="weak" if cfg.batch_per_device else "fixed", lr=cfg.lr,
                  sync_bn=cfg.sync_bn, seed=cfg.seed, threads=cfg.threads,
                  cores_per_device=cfg.cores_per_device, target_accuracy=cfg.target_accuracy,
                  eval_samples=cfg.eval_samples, micro_batches=cfg.micro_batches,
                  nodes=cfg.nodes, node_rank=cfg.node_rank if cfg.nodes > 1 else None,
                  launcher=cfg.launcher if cfg.nodes > 1 else None,
                  status="failed",
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


def _cxx() -> str | None:
    """The C++ compiler that compilers such as torch.compile's inductor build CPU kernels
    with (CXX, else c++ / g++ / clang++ on PATH), with its version; None without one."""
    for name in filter(None, (os.environ.get("CXX"), "c++", "g++", "clang++")):
        path = shutil.which(name)
        if path:
            try:
                out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=20)
                return f"{name}: {out.stdout.splitlines()[0]}" if out.stdout else name
            except (OSError, subprocess.SubprocessError):
                return name
    return None


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def env_info() -> dict:
    """Where a figure was measured: read without importing any framework."""
    from .registry import FRAMEWORKS
    dists = ["numpy", *dict.fromkeys(d for f in FRAMEWORKS.values() for d in f.dists)]
    return {
        "python": platform.python_version(),
        "os": platform.platform(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "gpu_model": _gpu_model(),
        "libraries": {d: v for d in dists if (v := _version(d))},
        "cxx": _cxx(),
    }


def write_atomic(path: str | os.PathLike, data) -> None:
    """Write JSON so that a reader sees the old file or the new one, never half of one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".tmp", delete=False) as f:
        json.dump(data, f, indent=1)
        tmp = f.name
    os.replace(tmp, path)


def framework_version(framework: str, env: dict) -> str | None:
    """The framework's version as the environment record has it (no import)."""
    from .registry import facts
    return next((env["libraries"][d] for d in facts(framework).dists if d in env["libraries"]), None)


def record_filename(record: dict) -> str:
    model = "" if record.get("model", "lenet") == "lenet" else f"{record['model']}-"
    sync = "-syncbn" if record.get("sync_bn") else ""
    # an execution other than the mode's default is named (a default run's file keeps
    # its name, whether or not --execution named it)
    ran, default = record.get("execution"), _default_execution(record["framework"], record["mode"])
    execution = f"-{ran}" if ran and default and ran != default else ""
    nodes = f"{record['nodes']}nodes-" if (record.get("nodes") or 1) > 1 else ""
    return (f"{model}{record['framework']}-{record['mode']}{sync}{execution}-"
            f"{nodes}{record['devices']}dev.json")


def ok_repeats(record: dict) -> list[dict]:
    """The figures of a record's successful repeats (a record without "repeats"
    counts as one repeat)."""
    repeats = record.get("repeats") or [{k: record.get(k) for k in REPEAT_KEYS}]
    return [r for r in repeats if r.get("status") == "ok"]


class RecordError(ValueError):
    """A file in a results folder that is not a readable run record; names the file."""


def read_record(path: str | os.PathLike) -> dict:
    path = Path(path)
    try:
        record = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise RecordError(f"{path} is not a readable run record ({type(e).__name__}: {e}); "
                          "delete it to run that configuration again") from None
    missing = ([k for k in ("framework", "mode", "devices", "status") if k not in record]
               if isinstance(record, dict) else ["keys"])
    if missing:
        raise RecordError(f"{path} is not a run record (no {', '.join(missing)}); "
                          "delete it to run that configuration again")
    return record


def load_records(directory: str | os.PathLike) -> list[dict]:
    """Every record in a results folder, in the order compare runs them (grouped by
    model, then framework). A corrupt record raises RecordError naming the file."""
    from .registry import NAMES
    records = [read_record(p) for p in Path(directory).glob("*dev.json")]
    order = {n: i for i, n in enumerate(NAMES)}
    from .modes import NAMES as MODES
    executions = list(modes.EXECUTIONS)
    return sorted(records, key=lambda r: (r.get("model", "lenet"),
                                          order.get(r["framework"], len(order)),
                                          MODES.index(r["mode"]) if r["mode"] in MODES else 99,
                                          bool(r.get("sync_bn")),
                                          executions.index(r["execution"])
                                          if r.get("execution") in executions else -1,
                                          r["devices"]))
