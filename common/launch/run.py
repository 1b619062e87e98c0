"""One run, start to record: in this process, in a rank process per device started
here (common.launch.launcher), or across machines on the framework's own engine
(common.launch.engines, started by common.launch.nodes) over a network
(common.launch.networks). The epoch loop itself is common.core.loop; this module only
places it, pins its cores and turns its outcome into a record."""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import resource
import tempfile
import traceback
from pathlib import Path

from common.core.contract import NotApplicable
from common.core.loop import DIVERGENCE_FACTOR, train
from common.core import profiling
from common.core.modes import MODES
from common.core.plan import RunConfig
from common import models
from common.facts import data as data_mod, registry
from common.facts.machine import env_info, framework_version
from common.launch import engines, launcher, networks, nodes, progress
from common.launch.rank import _rank_main, apply_settings
from common.results import profile, trace, utilisation
from common.results.record import mark_not_installed, new_record, read_rank_parts


def _max_rss_mb() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return max(own, children) / 1024.0           # Linux reports KiB


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


def run(cfg: RunConfig, tell: bool = False, trace_path: Path | None = None) -> dict:
    """Run one (framework, model, mode, device count) and return its complete record.
    Failures are recorded in the record, never raised. With cfg.trace and a trace_path,
    the run's timeline goes there (common/results/trace.py)."""
    record = new_record(cfg)
    record["env"] = env_info()
    record["framework_version"] = framework_version(cfg.framework, record["env"])
    mode = MODES[cfg.mode]
    # a profiled run's events go beside its record (benchmarks.profile)
    events_path = profile.events_path(trace_path) if trace_path and cfg.profile_steps else None
    trace_path = trace_path if cfg.trace else None
    processes = mode.processes(cfg.framework, cfg.devices)
    if cfg.profile_steps and (cfg.nodes > 1 or processes > 1):
        # the profiler runs in this process around its own trainer's steps; ranks and
        # nodes have their own processes, whose events it never sees
        record.update(status="not-applicable", error=(
            f"an op-level profile runs one process ({cfg.framework} {cfg.mode} on "
            f"{cfg.devices} device(s) x {cfg.nodes} node(s) runs {processes * cfg.nodes}); "
            "profile it on 1 device"))
        return record
    if cfg.nodes > 1:
        return _run_nodes(cfg, record, mode, tell, trace_path)
    gap = mode.gap(cfg.framework, cfg.sync_bn, cfg.execution)
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
    if not registry.is_installed(cfg.framework):
        return mark_not_installed(record)
    backend = registry.get(cfg.framework, profiled=bool(cfg.profile_steps))
    with outcome(record):
        ds = data_mod.load(cfg.dataset, cfg.data_dir, cfg.seed, models.get(cfg.model).IMAGE_SHAPE[1])
        record["framework_version"] = backend.version()
        if processes > 1:
            record["device_names"] = mode.devices(backend, cfg.devices)
            mode.precheck(backend, cfg, record["device_names"])
            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / "rank0.json"
                # ranks are new processes: they read their thread count at import
                launcher.launch(_rank_main, processes, (cfg.to_dict(), str(path), tell),
                                env={"OMP_NUM_THREADS": str(threads)}, cores=cores)
                result = json.loads(path.read_text())
                parts = trace.read_parts(tmp)
                memory = utilisation.combine_ranks(read_rank_parts(tmp, "memory"))
            record["device_names"] = result.pop("device_names")
            peak = result.pop("peak_memory_mb_device")
        else:
            backend.setup(cpu_devices=cfg.devices, threads=threads)
            apply_settings(backend, cfg)
            devices = mode.devices(backend, cfg.devices)
            record["device_names"] = devices
            mode.precheck(backend, cfg, devices)
            trainer = mode.trainer(backend, cfg, devices)
            if cfg.profile_steps:
                _profile(record, backend, trainer, cfg, ds, events_path)
                return record
            result = train(backend, trainer, cfg, ds,
                           progress.say(progress.STEP) if tell else progress.silent,
                           on_estimate=progress.estimate_printer() if tell else progress.silent)
            peak = backend.peak_memory_mb()
            timeline = result.pop("timeline", None)
            parts = [trace.process_events(timeline["spans"], timeline["origin"], 0,
                                          f"process 0: {', '.join(devices)}")] if timeline else []
            memory = utilisation.memory_per_device(devices, backend.device_peak_memory_mb(),
                                                   utilisation.own_rss_mb())
            result["peak_flops_device"] = utilisation.device_peak(backend, devices[0])
        _finish(record, result, backend.facts, processes, peak, memory)
        _write_trace(record, trace_path, parts)
        if gap:
            record.update(status="failed", error=f"listed as a known gap ({gap}) but it ran; "
                                                 "update its `lacks` in common/facts/registry.py")
    return record


def _profile(record: dict, backend, trainer, cfg: RunConfig, ds, events_path: Path | None) -> None:
    """A profiled run's record: its steps' time by op class (common/results/profile.py),
    the profiler's cost, and its events in a file beside it."""
    result = profiling.profile(backend, trainer, cfg, ds)
    attribution = profile.of_run(result)
    events = result.pop("events")
    record["profile"] = {**result, **attribution, "env": backend.facts.profile_env}
    if events_path is not None:
        profile.write_events(events_path, events)
        record["profile"]["events_file"] = events_path.name
    record["device_kind"] = record["device_names"][0].split(":")[0]
    record["status"] = "ok"


def _finish(record: dict, result: dict, facts: registry.Framework, processes: int,
            peak: float | None, memory: tuple[list | None, str]) -> None:
    """A record completed from a finished run's result."""
    flops_peak, flops_text = result.pop("peak_flops_device")
    record.update(result)
    record["device_kind"] = record["device_names"][0].split(":")[0]
    record["processes"] = processes
    record["native_mechanism"] = MODES[record["mode"]].mechanism(facts)
    record["execution_mechanism"] = facts.executions.get(record["execution"])
    record["peak_memory_mb"] = peak if peak is not None else _max_rss_mb()
    record["peak_memory_source"] = "device allocator" if peak is not None else "process max RSS"
    record["peak_memory_mb_per_device"], record["peak_memory_per_device_source"] = memory
    utilisation.fill(record, flops_peak, flops_text)
    record["status"] = "ok"
    if record.get("diverged_step") is not None:
        record.update(status="diverged", error=(
            f"the loss diverged at step {record['diverged_step']} (not finite, or over "
            f"{DIVERGENCE_FACTOR:g}x the first loss); last finite loss "
            f"{record['last_finite_loss']}; lower --lr"))


def _write_trace(record: dict, path: Path | None, parts: list[list[dict]]) -> None:
    """The run's timeline, every process's events in one file, named in the record with
    what tracing does to its times."""
    if path is None:
        return
    if not parts:
        raise trace.TraceError("a traced run whose processes left no timeline")
    trace.write(path, trace.merge(parts))
    record["trace"] = {"file": Path(path).name, "note": trace.NOTE}


def _run_nodes(cfg: RunConfig, record: dict, mode, tell: bool, trace_path: Path | None) -> dict:
    """A run across cfg.nodes machines on the framework's own engine (common.launch.nodes),
    on the nodes of cfg's network (common.launch.networks) that run here."""
    if not registry.is_installed(cfg.framework):
        return mark_not_installed(record)
    network = networks.get(cfg.network)
    facts = registry.facts(cfg.framework)
    why = (mode.across_nodes(cfg.framework) or registry.gap(cfg.framework, "nodes")
           or mode.gap(cfg.framework, execution=cfg.execution))
    if why is None and cfg.sync_bn:
        why = "synchronised BatchNorm across machines is not run by the suite (one machine only)"
    engine = None if why else engines.of_framework(cfg.framework)
    if engine and engine.needs_every_host and not network.knows_every_host(cfg):
        why = (f"{engine.needs_every_host}: give every node's host with "
               "--node-hosts HOST0,HOST1,...")
    if why:
        record.update(status="not-applicable", error=why)
        return record
    record["engine_starter"] = engine.about
    record["servers"] = engine.servers(cfg.nodes, cfg.servers)
    say = progress.forward if tell else progress.silent
    with outcome(record), network.up(cfg) as (cluster, link):
        record["link"] = link
        if len(cluster.local_nodes) == 1:   # this machine's node, as its network placed it
            record["node_rank"] = cluster.local_nodes[0]      # (an allocation's, with Slurm)
        cores = None
        if cfg.cores_per_device:     # each node its own cores: C per device
            sets = launcher.core_sets(cfg.cores_per_device * cfg.devices, len(cluster.local_nodes))
            cores = dict(zip(cluster.local_nodes, sets))
            record["cpu_affinity"] = sets
        if network.shares_cores and not cfg.cores_per_device:
            # the simulated nodes share this machine's threads
            cfg = dataclasses.replace(cfg, threads=max(1, cfg.threads // cfg.nodes))
        with tempfile.TemporaryDirectory(prefix="dl-compare-nodes-") as tmp:
            results = nodes.run(cfg, cluster, Path(tmp), say, cores)
            parts = trace.read_parts(tmp)      # this machine's ranks
            memory = utilisation.combine_ranks(read_rank_parts(tmp, "memory"))
        counted = [r.pop("link_bytes", None) for r in results]
        result = results[0]
        record["node_sec_per_epoch"] = [r["sec_per_epoch"] for r in results]
        record["device_names"] = result.pop("device_names")
        peak = result.pop("peak_memory_mb_device")
        _finish(record, result, facts, result["world_size"], peak, memory)
        _write_trace(record, trace_path, parts)
        record["link"].update(network.carried(counted, cfg, sum(result["steps_per_epoch"])))
        if record["link"].get("short"):
            record.update(status="failed", error=record["link"]["short"])
    return record
