"""One rank of a multi-process run: the process that joins the framework's process
group and trains its share. Started by common.launch.launcher (one machine:
`_rank_main`) or, on several machines, by each framework's own launcher as a script
(a path, since Paddle's launcher takes one):
`python common/launch/rank.py CONFIG_JSON OUT_DIR ROLE`.

ROLE "worker" trains; "server" and "scheduler" are MXNet's parameter-server roles,
which importing MXNet with DMLC_ROLE set runs to the end."""
from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
from pathlib import Path


def die_with_parent() -> None:
    """Linux: SIGKILL this process when its parent ends. torchrun and Paddle's launcher
    start their workers in sessions of their own, so a launcher killed hard would leave
    them running; this ties every rank to the process that started it. Called first,
    before the imports below: a parent that ended while this process was still importing
    (a second or more on a busy machine) left it training on without the signal set (seen:
    a Ctrl-C'd 2-node run left both ranks behind), so a parent gone by the time the signal
    is set ends this process too."""
    parent = os.getppid()
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)    # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if parent == 1 or os.getppid() != parent:     # orphaned before the signal was set
        os._exit(1)


if __name__ == "__main__":
    die_with_parent()

if __package__ in (None, ""):      # run as a script: the repository root on the path first
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from common.core.loop import train  # noqa: E402 (after the path fix above)
from common.core.modes import MODES  # noqa: E402
from common.core.plan import RunConfig  # noqa: E402
from common import models  # noqa: E402
from common.facts import data as data_mod, registry, settings  # noqa: E402
from common.launch import launcher, netns, progress  # noqa: E402
from common.results import trace, utilisation  # noqa: E402
from common.results.record import write_rank_part  # noqa: E402


def apply_settings(backend, cfg: RunConfig) -> None:
    """The run's in-process settings (common/facts/settings.py), after the backend's set-up
    and before any trainer is built: in this process, and in every rank's."""
    for s in settings.get(cfg.framework, cfg.settings):
        if s.hook:
            backend.apply_setting(s.name)


def rank_main(cfg: RunConfig, result_path: Path, tell: bool = True) -> None:
    """Train this rank's share; the first rank of each machine writes that machine's
    result. A rank holds one device, or all of its machine's devices where one process
    per machine runs them (MXNet's KVStore worker). With `tell`, the first rank tells
    the parent of its progress (common.launch.progress)."""
    rank = launcher.RankInfo.from_env()
    backend = registry.get(cfg.framework)
    held = max(1, cfg.devices // rank.local_world_size)
    backend.setup(cpu_devices=held, threads=(cfg.cores_per_device * held if cfg.cores_per_device
                                             else max(1, cfg.threads // rank.local_world_size)))
    apply_settings(backend, cfg)      # before join: an engine's exchange is set up there
    if tell and rank.local_rank == 0:
        progress.say(progress.STARTED)()
    rank = backend.join(rank, cfg.join_timeout) or rank   # a framework may number ranks itself
    first = rank.local_rank == 0
    tells = tell and first
    if tells:
        progress.say(progress.JOINED)()
    try:
        ds = data_mod.load(cfg.dataset, cfg.data_dir, cfg.seed, models.get(cfg.model).IMAGE_SHAPE[1])
        mode = MODES[cfg.mode]
        devices = (mode.devices(backend, held) if held > 1 else [backend.rank_device(rank)])
        trainer = mode.trainer(backend, cfg, devices, rank.rank, rank.world_size)
        result = train(backend, trainer, cfg, ds,
                       progress.say(progress.STEP) if tells else progress.silent,
                       evaluate=first or mode.every_rank_predicts,
                       on_estimate=progress.estimate_printer() if tells else progress.silent,
                       on_evaluated=progress.say(progress.EVALUATED) if tells else progress.silent,
                       link=_link_counters() if first else None)
        timeline = result.pop("timeline", None)
        if timeline is not None:     # every rank its own events (pid = rank), merged by run
            trace.write_part(Path(result_path).parent, rank.rank, trace.process_events(
                timeline["spans"], timeline["origin"], rank.rank,
                f"rank {rank.rank}: {', '.join(devices)}"))
        # every rank its own memory, beside the result (common.launch.run gathers them)
        mb, source = utilisation.memory_per_device(devices, backend.device_peak_memory_mb(),
                                                   utilisation.own_rss_mb())
        write_rank_part(Path(result_path).parent, "memory", rank.rank,
                        {"rank": rank.rank, "mb": mb, "source": source})
        if first:
            result["peak_flops_device"] = utilisation.device_peak(backend, devices[0])
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


def _link_counters():
    """The node's link byte counters, where the node supervisor names the interface to count
    (common.launch.nodes, in an emulated node's namespace)."""
    interface = os.environ.get(netns.LINK_ENV)
    return (lambda: netns.counters(interface)) if interface else None


def _rank_main(cfg_dict: dict, result_path: str, tell: bool) -> None:
    """A rank started by common.launch.launcher.launch (picklable arguments)."""
    rank_main(RunConfig(**cfg_dict), Path(result_path), tell)


def main(argv: list[str]) -> int:
    cfg_json, out_dir, role = argv
    cfg = RunConfig(**json.loads(cfg_json))
    if role in ("server", "scheduler"):
        registry.get(cfg.framework)          # runs the role and exits inside the import
        print(f"{cfg.framework} ran no {role}: its build has no distributed KVStore",
              file=sys.stderr)
        return 1
    rank_main(cfg, Path(out_dir) / f"node{os.environ.get('DL_COMPARE_NODE', '0')}.json")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
