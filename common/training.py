"""The one epoch loop: warm-up, timing, evaluation and the record, for every
framework, model and mode. Frameworks only supply a Trainer; modes say how it is
built and how many processes it takes; common.launcher starts those processes."""
from __future__ import annotations

import contextlib
import dataclasses
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

from . import data as data_mod, launcher, models, registry
from .contract import Backend, NotApplicable, Trainer
from .modes import MODES
from .results import STEP_LOSSES_KEPT, RunConfig, env_info, framework_version, new_record


def _max_rss_mb() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return max(own, children) / 1024.0           # Linux reports KiB


# A loss that grows past this many times the first step's counts as diverged.
DIVERGENCE_FACTOR = 100.0


def divergence(losses: np.ndarray, first: float) -> int | None:
    """Index of the first loss that is not finite or exceeds DIVERGENCE_FACTOR x the
    run's first loss, or None."""
    bad = ~np.isfinite(losses) | (np.abs(losses) > DIVERGENCE_FACTOR * abs(first))
    return int(np.argmax(bad)) if bad.any() else None


def train(backend: Backend, trainer: Trainer, cfg: RunConfig, ds: data_mod.Dataset,
          on_step: Callable[[], None] = lambda: None, evaluate: bool = True,
          on_estimate: Callable[[float], None] = lambda s: None,
          on_evaluated: Callable[[], None] = lambda: None) -> dict:
    """Warm up, reset to the initial weights, then train and time cfg.epochs epochs.
    The device is synchronised before every clock read."""
    model = models.get(cfg.model)
    params0, state0 = model.init_params(cfg.seed), model.init_state()
    orders = [data_mod.batch_order(len(ds.X_train), cfg.batch_size, e, cfg.seed)
              [: cfg.steps_per_epoch] for e in range(cfg.epochs)]
    X_test, y_test = ds.X_test[: cfg.eval_samples], ds.y_test[: cfg.eval_samples]
    out = {"sec_per_epoch": [], "train_loss": [], "step_losses": [], "test_accuracy_per_epoch": [],
           "eval_sec": []}

    # Warm-up (graph tracing, allocator growth) on the first batches, timed apart;
    # then every replica goes back to the initial weights so the run is unchanged.
    # Its last step, timed alone, gives the estimate a user sees before a long run.
    warmup = orders[0][: cfg.warmup_steps]
    step_secs = []
    backend.synchronize()
    t0 = time.perf_counter()
    for i in range(len(warmup)):
        t_step = time.perf_counter()
        trainer.losses(trainer.train_epoch(ds.X_train, ds.y_train, warmup[i:i + 1], lambda: None))
        backend.synchronize()
        step_secs.append(time.perf_counter() - t_step)
    out["warmup_sec"] = time.perf_counter() - t0
    if len(warmup):
        out["estimated_sec_per_epoch"] = step_secs[-1] * len(orders[0])
        on_estimate(out["estimated_sec_per_epoch"])
    # What tracing and compiling cost, paid once: the first step over a later one's
    # time (a compiled execution compiles in its first step; an eager one's first
    # step only warms allocators and caches)
    out["compile_sec"] = max(0.0, step_secs[0] - step_secs[-1]) if len(step_secs) > 1 else None
    trainer.load_params(params0, state0)

    done = 0
    for order in orders:
        backend.synchronize()
        t0 = time.perf_counter()
        handles = trainer.train_epoch(ds.X_train, ds.y_train, order, on_step)
        backend.synchronize()
        out["sec_per_epoch"].append(time.perf_counter() - t0)
        losses = trainer.losses(handles)
        # Divergence ends the run at the end of the epoch it shows in (the losses are
        # read once per epoch, so that steps never wait for the host).
        bad = divergence(losses, losses[0] if done == 0 else out["first_loss"])
        out.setdefault("first_loss", float(losses[0]) if len(losses) else None)
        if bad is not None:
            finite = [float(v) for v in losses[:bad] if np.isfinite(v)]
            out["diverged_step"] = done + bad
            out["last_finite_loss"] = finite[-1] if finite else None
            out["step_losses"] += [float(v) for v in losses[: max(0, STEP_LOSSES_KEPT - len(out["step_losses"]))]]
            break
        done += len(order)
        out["train_loss"].append(float(np.mean(losses)))
        if len(out["step_losses"]) < STEP_LOSSES_KEPT:
            out["step_losses"] += [float(v) for v in losses[: STEP_LOSSES_KEPT - len(out["step_losses"])]]
        if evaluate:
            t0 = time.perf_counter()
            pred = trainer.predict(X_test)
            out["eval_sec"].append(time.perf_counter() - t0)
            on_evaluated()
            out["test_accuracy_per_epoch"].append(float((pred == y_test).mean()))
            if (cfg.target_accuracy is not None and out.get("epochs_to_target") is None
                    and out["test_accuracy_per_epoch"][-1] >= cfg.target_accuracy):
                # training time to the end of the first epoch that reached it (evaluation
                # excluded); the run goes on to its epochs (every rank runs them all)
                out["epochs_to_target"] = len(out["sec_per_epoch"])
                out["sec_to_target"] = sum(out["sec_per_epoch"])
    out.pop("first_loss", None)
    if evaluate:
        out["test_accuracy"] = (out["test_accuracy_per_epoch"][-1]
                                if out["test_accuracy_per_epoch"] else None)
    steps = sum(len(o) for o in orders[: len(out["sec_per_epoch"])])
    total = sum(out["sec_per_epoch"])
    out["samples_per_sec"] = steps * cfg.batch_size / total if total else None
    out["steps_per_epoch"] = [len(o) for o in orders]
    out.update(trainer.figures())
    return out


def rank_main(cfg: RunConfig, result_path: Path, progress: bool = True) -> None:
    """One process of a multi-process run, started by common.launcher (one machine) or
    by a framework's own launcher (common.nodes); the first rank of each machine writes
    that machine's result. A rank holds one device, or all of its machine's devices
    where one process per machine runs them (MXNet's KVStore worker)."""
    rank = launcher.RankInfo.from_env()
    backend = registry.get(cfg.framework)
    held = max(1, cfg.devices // rank.local_world_size)
    backend.setup(cpu_devices=held, threads=(cfg.cores_per_device * held if cfg.cores_per_device
                                             else max(1, cfg.threads // rank.local_world_size)))
    rank = backend.join(rank, cfg.join_timeout) or rank   # a framework may number ranks itself
    first = rank.local_rank == 0
    if progress and first:
        _say("@joined")()
    try:
        ds = data_mod.load(cfg.dataset, cfg.data_dir, cfg.seed)
        mode = MODES[cfg.mode]
        devices = (mode.devices(backend, held) if held > 1 else [backend.rank_device(rank)])
        trainer = mode.trainer(backend, cfg, devices, rank.rank, rank.world_size)
        result = train(backend, trainer, cfg, ds, progress_printer() if (progress and first)
                       else lambda: None, evaluate=first or mode.every_rank_predicts,
                       on_estimate=estimate_printer() if (progress and first) else lambda s: None,
                       on_evaluated=_say("@evaluated") if (progress and first) else lambda: None)
        if first:
            result["device_names"] = (devices if held > 1 else [
                backend.rank_device(launcher.RankInfo(r, rank.world_size, r,
                                                      rank.local_world_size, rank.master_addr,
                                                      rank.master_port))
                for r in range(rank.local_world_size)])
            result["peak_memory_mb_device"] = backend.peak_memory_mb()
            result["world_size"] = rank.world_size
            Path(result_path).write_text(json.dumps(result))
    finally:
        backend.leave()


def _rank_main(cfg_dict: dict, result_path: str, progress: bool) -> None:
    """A rank started by common.launcher.launch (picklable arguments)."""
    rank_main(RunConfig(**cfg_dict), Path(result_path), progress)


def _say(line: str) -> Callable[[], None]:
    """A callback that tells the parent process one line (a node's supervisor watches
    for them: common.nodes)."""
    def say():
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
    return say


def progress_printer() -> Callable[[], None]:
    """A step callback that tells the parent process (benchmarks.compare) of progress
    by one short line on stdout; it never touches the device."""
    return _say("@step")


def estimate_printer() -> Callable[[float], None]:
    """Tells the parent process the estimated seconds per epoch, measured in warm-up."""
    def on_estimate(seconds):
        sys.stdout.write(f"@estimate {seconds:.3f}\n")
        sys.stdout.flush()
    return on_estimate


@contextlib.contextmanager
def outcome(record: dict):
    """A run that cannot go or fails is data in its record, never raised: the others go on."""
    try:
        yield
    except NotApplicable as e:
        record.update(status="not-applicable", error=str(e))
    except Exception as e:  # noqa: BLE001
        record.update(status="failed", error=f"{type(e).__name__}: {e}",
                      traceback=traceback.format_exc(limit=8))


def run(cfg: RunConfig, progress: bool = False) -> dict:
    """Run one (framework, model, mode, device count) and return its complete record.
    Failures are recorded in the record, never raised."""
    record = new_record(cfg)
    record["env"] = env_info()
    record["framework_version"] = framework_version(cfg.framework, record["env"])
    mode = MODES[cfg.mode]
    if cfg.nodes > 1:
        return _run_nodes(cfg, record, mode, progress)
    gap = mode.gap(cfg.framework, cfg.sync_bn, record["execution"])
    processes = mode.processes(cfg.framework, cfg.devices)
    threads = max(1, cfg.threads // processes)
    cores = None
    if cfg.cores_per_device:
        # honest CPU scaling: every device its own cores, pinned before the framework is
        # imported (its thread pools start on them); a process of several devices (one
        # that runs them all) gets all of theirs, and as many threads
        try:
            cores = launcher.core_sets(cfg.cores_per_device * cfg.devices // processes, processes)
        except launcher.LaunchError as e:
            record.update(status="failed", error=f"--cores-per-device: {e}")
            return record
        threads = len(cores[0])
        if processes == 1:
            os.sched_setaffinity(0, cores[0])
        record["cpu_affinity"] = cores
    try:
        backend = registry.get(cfg.framework)
    except registry.NotInstalled as e:
        record.update(status="not-installed", error=str(e))
        return record
    with outcome(record):
        ds = data_mod.load(cfg.dataset, cfg.data_dir, cfg.seed)
        record["framework_version"] = backend.version()
        if processes > 1:
            record["device_names"] = mode.devices(backend, cfg.devices)
            mode.precheck(backend, cfg, record["device_names"])
            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / "rank0.json"
                # ranks are new processes: they read their thread count at import
                launcher.launch(_rank_main, processes, (cfg.to_dict(), str(path), progress),
                                env={"OMP_NUM_THREADS": str(threads)}, cores=cores)
                result = json.loads(path.read_text())
            record["device_names"] = result.pop("device_names")
            peak = result.pop("peak_memory_mb_device")
        else:
            backend.setup(cpu_devices=cfg.devices, threads=threads)
            devices = mode.devices(backend, cfg.devices)
            record["device_names"] = devices
            mode.precheck(backend, cfg, devices)
            trainer = mode.trainer(backend, cfg, devices)
            result = train(backend, trainer, cfg, ds,
                           progress_printer() if progress else lambda: None,
                           on_estimate=estimate_printer() if progress else lambda s: None)
            peak = backend.peak_memory_mb()
        _finish(record, result, backend.facts, processes, peak)
        if gap:
            record.update(status="failed", error=f"listed as a known gap ({gap}) but it ran; "
                                                 "update common.registry.KNOWN_GAPS")
    return record


def _finish(record: dict, result: dict, facts: registry.Framework, processes: int,
            peak: float | None) -> None:
    """A record completed from a finished run's result."""
    record.update(result)
    record["device_kind"] = record["device_names"][0].split(":")[0]
    record["processes"] = processes
    record["native_mechanism"] = facts.native if record["mode"] == "native" else None
    record["execution_mechanism"] = facts.executions.get(record["execution"])
    record["peak_memory_mb"] = peak if peak is not None else _max_rss_mb()
    record["peak_memory_source"] = "device allocator" if peak is not None else "process max RSS"
    record["status"] = "ok"
    if record.get("diverged_step") is not None:
        record.update(status="diverged", error=(
            f"the loss diverged at step {record['diverged_step']} (not finite, or over "
            f"{DIVERGENCE_FACTOR:g}x the first loss); last finite loss "
            f"{record['last_finite_loss']}; lower --lr"))


def _run_nodes(cfg: RunConfig, record: dict, mode, progress: bool) -> dict:
    """A run across cfg.nodes machines on the framework's own engine (common.nodes):
    every node here with --launcher local, else this machine's one."""
    from . import nodes
    if not registry.is_installed(cfg.framework):
        record.update(status="not-installed", error=f"framework {cfg.framework!r} is not "
                      f"installed; install it with: {registry.install_hint(cfg.framework)}")
        return record
    why = mode.across_nodes() or mode.gap(cfg.framework, execution=record["execution"])
    if why is None and cfg.sync_bn:
        why = "synchronised BatchNorm across machines is not run by the suite (one machine only)"
    if why is None and registry.facts(cfg.framework).cluster == "tf-config" and (
            cfg.launcher == "cluster" and not cfg.node_hosts):
        why = ("TF_CONFIG lists every worker's address: give every node's host with "
               "--node-hosts HOST0,HOST1,...")
    if why:
        record.update(status="not-applicable", error=why)
        return record
    if cfg.launcher == "local":
        cluster = nodes.Cluster(cfg.nodes, tuple(range(cfg.nodes)), "127.0.0.1",
                                launcher.free_port(), None, cfg.join_timeout)
    else:
        host, port = cfg.master.rsplit(":", 1)
        cluster = nodes.Cluster(cfg.nodes, (cfg.node_rank,), host, int(port),
                                tuple(cfg.node_hosts) if cfg.node_hosts else None, cfg.join_timeout)
    facts = registry.facts(cfg.framework)
    record["cluster_launcher"] = nodes.LAUNCHERS[facts.cluster]
    record["servers"] = nodes.servers(cfg.framework, cfg.nodes)
    say = (lambda line: (sys.stdout.write(line), sys.stdout.flush())) if progress else (lambda line: None)
    with outcome(record):
        cores = None
        if cfg.cores_per_device:     # each node its own cores: C per device
            sets = launcher.core_sets(cfg.cores_per_device * cfg.devices, len(cluster.local_nodes))
            cores = dict(zip(cluster.local_nodes, sets))
            record["cpu_affinity"] = sets
        if cfg.launcher == "local" and not cfg.cores_per_device:
            # the simulated nodes share this machine's threads
            cfg = dataclasses.replace(cfg, threads=max(1, cfg.threads // cfg.nodes))
        with tempfile.TemporaryDirectory(prefix="dl-compare-nodes-") as tmp:
            results = nodes.run(cfg, cluster, Path(tmp), say, cores)
        result = results[0]
        record["node_sec_per_epoch"] = [r["sec_per_epoch"] for r in results]
        record["device_names"] = result.pop("device_names")
        peak = result.pop("peak_memory_mb_device")
        _finish(record, result, facts, result["world_size"], peak)
    return record
