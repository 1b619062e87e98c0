"""The one epoch loop: warm-up, timing, evaluation and the record, for every
framework and mode. Frameworks only supply a Trainer."""
from __future__ import annotations

import json
import os
import resource
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Callable

import numpy as np

from . import data as data_mod, registry
from .contract import Backend, NotApplicable, Trainer
from .lenet import init_params
from .results import STEP_LOSSES_KEPT, RunConfig, env_info, new_record


def _max_rss_mb() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return max(own, children) / 1024.0           # Linux reports KiB


def train(backend: Backend, trainer: Trainer, cfg: RunConfig, ds: data_mod.Dataset,
          on_step: Callable[[], None] = lambda: None, evaluate: bool = True) -> dict:
    """Warm up, reset to the initial weights, then train and time cfg.epochs epochs.
    The device is synchronised before every clock read."""
    params0 = init_params(cfg.seed)
    orders = [data_mod.batch_order(len(ds.X_train), cfg.batch_size, e, cfg.seed)
              [: cfg.steps_per_epoch] for e in range(cfg.epochs)]
    out = {"sec_per_epoch": [], "train_loss": [], "step_losses": [], "test_accuracy_per_epoch": [],
           "eval_sec": []}

    # Warm-up (graph tracing, allocator growth) on the first batches, timed apart;
    # then every replica goes back to the initial weights so the run is unchanged.
    backend.synchronize()
    t0 = time.perf_counter()
    if cfg.warmup_steps:
        trainer.losses(trainer.train_epoch(ds.X_train, ds.y_train,
                                           orders[0][: cfg.warmup_steps], lambda: None))
    backend.synchronize()
    out["warmup_sec"] = time.perf_counter() - t0
    trainer.load_params(params0)

    for order in orders:
        backend.synchronize()
        t0 = time.perf_counter()
        handles = trainer.train_epoch(ds.X_train, ds.y_train, order, on_step)
        backend.synchronize()
        out["sec_per_epoch"].append(time.perf_counter() - t0)
        losses = trainer.losses(handles)
        out["train_loss"].append(float(np.mean(losses)))
        if len(out["step_losses"]) < STEP_LOSSES_KEPT:
            out["step_losses"] += [float(v) for v in losses[: STEP_LOSSES_KEPT - len(out["step_losses"])]]
        if evaluate:
            t0 = time.perf_counter()
            pred = trainer.predict(ds.X_test)
            out["eval_sec"].append(time.perf_counter() - t0)
            out["test_accuracy_per_epoch"].append(float((pred == ds.y_test).mean()))
    if evaluate:
        out["test_accuracy"] = out["test_accuracy_per_epoch"][-1] if orders else None
    steps = sum(len(o) for o in orders)
    total = sum(out["sec_per_epoch"])
    out["samples_per_sec"] = steps * cfg.batch_size / total if total else None
    out["steps_per_epoch"] = [len(o) for o in orders]
    return out


def _rank_device(backend: Backend, rank: int, world: int) -> str:
    return f"gpu:{rank}" if backend.num_gpus() >= world else "cpu:0"


def _rank_main(rank: int, world: int, cfg_dict: dict, result_path: str, progress: bool) -> None:
    """One process of a multi-process native run; rank 0 writes the result."""
    cfg = RunConfig(**cfg_dict)
    backend = registry.get(cfg.framework)
    backend.setup(cpu_devices=1, threads=max(1, cfg.threads // world))
    ds = data_mod.load(cfg.dataset, cfg.data_dir, cfg.seed)
    device = _rank_device(backend, rank, world)
    trainer = backend.native_trainer(init_params(cfg.seed), [device], cfg.lr, rank, world)
    on_step = progress_printer() if (progress and rank == 0) else (lambda: None)
    result = train(backend, trainer, cfg, ds, on_step, evaluate=(rank == 0))
    if rank == 0:
        result["device_names"] = [_rank_device(backend, r, world) for r in range(world)]
        result["peak_memory_mb_device"] = backend.peak_memory_mb()
        Path(result_path).write_text(json.dumps(result))


def progress_printer() -> Callable[[], None]:
    """A step callback that tells the parent process (benchmarks.compare) of progress
    by one short line on stdout; it never touches the device."""
    def on_step():
        sys.stdout.write("@step\n")
        sys.stdout.flush()
    return on_step


def run(cfg: RunConfig, progress: bool = False) -> dict:
    """Run one (framework, mode, device count) and return its complete record.
    Failures are recorded in the record, never raised."""
    record = new_record(cfg)
    record["env"] = env_info()
    record["framework_version"] = record["env"]["libraries"].get(
        {"pytorch": "torch", "paddle": "paddlepaddle"}.get(cfg.framework, cfg.framework))
    gap = registry.KNOWN_GAPS.get((cfg.framework, cfg.mode))
    try:
        backend = registry.get(cfg.framework)
    except registry.NotInstalled as e:
        record.update(status="not-installed", error=str(e))
        return record
    try:
        ds = data_mod.load(cfg.dataset, cfg.data_dir, cfg.seed)
        record["framework_version"] = backend.version()
        multiprocess = cfg.mode == "native" and backend.native_uses_processes and cfg.devices > 1
        backend.setup(cpu_devices=1 if multiprocess else cfg.devices,
                      threads=max(1, cfg.threads // cfg.devices) if multiprocess else cfg.threads)
        params0 = init_params(cfg.seed)
        if multiprocess:
            # ranks are new processes: they read their thread count at import
            os.environ["OMP_NUM_THREADS"] = str(max(1, cfg.threads // cfg.devices))
            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / "rank0.json"
                backend.spawn(_rank_main, cfg.devices, (cfg.to_dict(), str(path), progress))
                result = json.loads(path.read_text())
            record["device_names"] = result.pop("device_names")
            peak = result.pop("peak_memory_mb_device")
        else:
            devices = backend.devices(cfg.devices)
            record["device_names"] = devices
            if cfg.mode == "scratch":
                trainer = backend.scratch_trainer(params0, devices, cfg.lr)
            else:
                trainer = backend.native_trainer(params0, devices, cfg.lr)
            result = train(backend, trainer, cfg, ds, progress_printer() if progress else lambda: None)
            peak = backend.peak_memory_mb()
        record.update(result)
        record["device_kind"] = record["device_names"][0].split(":")[0]
        record["processes"] = cfg.devices if multiprocess else 1
        record["native_mechanism"] = backend.native_description if cfg.mode == "native" else None
        record["peak_memory_mb"] = peak if peak is not None else _max_rss_mb()
        record["peak_memory_source"] = "device allocator" if peak is not None else "process max RSS"
        record["status"] = "ok"
        if gap:
            record.update(status="failed", error=f"listed as a known gap ({gap}) but it ran; "
                                                 "update common.registry.KNOWN_GAPS")
    except NotApplicable as e:
        record.update(status="not-applicable", error=str(e))
    except Exception as e:  # noqa: BLE001 - a failed run is data, the others go on
        record.update(status="failed", error=f"{type(e).__name__}: {e}",
                      traceback=traceback.format_exc(limit=8))
    return record
