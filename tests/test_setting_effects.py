"""Each setting's effect, read in its framework's own process (issue 53): not that its flag
is set but that the library did what the setting names: the allocator is malloc, OpenMP's
threads are bound, a compiler compiled the step, bfloat16 ops ran, XLA's programs hold no
YNNPACK fusion (tests/helpers/setting_effects.py). The process starts as a run's worker
does (benchmarks.runner.run_config: the settings' environment from the start) and sets
the settings up as a run does. Each framework's settings go in two processes and each
probe is read in both: seen in its own, unseen in the other, where the setting is not
applied (its plant). A setting whose `what` says its effect is not seen is held to that:
unseen in both."""
from __future__ import annotations

import functools
import json
import os
import tempfile
from pathlib import Path

import pytest

from benchmarks import runner, tuned
from common.core.modes import MODES
from common.core.plan import RunConfig
from common.facts import registry, settings
from tests.conftest import THREADS, subprocess_env
from tests.helpers.setting_effects import PROBES

HELPER = "tests.helpers.setting_effects"
# the label of a setting whose effect is not seen (common/facts/settings.py)
NOT_SEEN = "its effect is not seen"
# Each framework's settings in two processes. Kept apart: what cannot share a process
# (two allocators: LD_PRELOAD's first one is malloc), what hides another's effect or
# fails with it
SPLIT = {
    "pytorch": (("compiled", "tcmalloc"), ("omp-affinity", "jemalloc", "bf16-autocast")),
    # measured: with xla, grappler's bfloat16 rewrite does not reach the function XLA
    # compiles (no bfloat16 op ran)
    "tensorflow": (("xla",), ("onednn-bf16",)),
    "mxnet": (("hybridize",), ("omp-affinity",)),
    # to_static with FLAGS_use_mkldnn dies of a segmentation fault
    # (docs/results/cpu-2core-paddle-onednn.md)
    "paddle": (("to-static",), ("onednn",)),
    "jax": (("ynn-fusion-off",), ()),
    # measured: XLA:CPU computes the step's convolutions and products in float32
    "keras-tensorflow": (("xla",), ("mixed-bf16",)),
    "keras-jax": (("ynn-fusion-off",), ("mixed-bf16",)),
    "keras-torch": (("compiled",), ("mixed-bf16",)),
}
# Not probed here: a GPU's settings (seen on a GPU only), and the exchange across nodes
# (kind "communication"), whose engine objects tests/test_settings.py reads
GPU_ONLY = {(f, s.name) for f, table in settings.SETTINGS.items() for s in table
            if "cpu" not in s.devices}
ACROSS_NODES = {(f, s.name) for f, table in settings.SETTINGS.items() for s in table
                if s.kind == "communication"}


def test_every_setting_is_probed_or_said_where_it_is_seen():
    """Every CPU setting has a probe and a process; a GPU's or an exchange's is listed so
    (planted: a setting added to a table without either fails here)."""
    for f, table in settings.SETTINGS.items():
        for s in table:
            probed = any(s.name in group for group in SPLIT.get(f, ()))
            assert probed != ((f, s.name) in GPU_ONLY | ACROSS_NODES), (f, s.name)
            assert not probed or s.name in PROBES, (f, s.name)


def _mode(framework: str) -> str:
    """The mode whose default execution is none a setting names (MXNet's native mode
    hybridizes already): native where it is so."""
    named = {s.execution for s in settings.SETTINGS[framework] if s.execution}
    modes = ["native", *(m for m, mode in MODES.items() if mode.default and m != "native")]
    return next(m for m in modes if not MODES[m].gap(framework)
                and registry.default_execution(framework, m) not in named)


def _applicable(framework: str, names) -> list[str]:
    return [s.name for s in settings.get(framework, names) if not settings.why_not(s, "cpu")]


def _threads(framework: str) -> int:
    """Two threads where the framework has an OpenMP binding to show (its probe reads
    threads bound to places of their own; the other process, its plant, must run as
    many); else one, as the conformance processes run, so that a compiled step's kernels
    are theirs (Inductor writes the thread count into their source) and may come from
    the session's cache: Keras on torch's compiled probe 37-60 s of a run with two."""
    return 2 if any("omp-affinity" in group for group in SPLIT[framework]) else THREADS


@functools.cache
def _readings(framework: str) -> tuple[dict, ...]:
    """Each of the framework's two processes' readings, run by the runner as a worker is
    run (its environment and interpreter), without the settings this machine refuses."""
    real = runner.run_worker

    def effects_worker(argv, log, timeout, on_line, env=None, cwd=None, stop=None, python=None):
        return real(["-m", HELPER, *argv[2:]], log, timeout, on_line, env=env, cwd=cwd,
                    stop=stop, python=python)
    mode, out, threads = _mode(framework), [], _threads(framework)
    runner.run_worker = effects_worker
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for i, group in enumerate(SPLIT[framework]):
                names = _applicable(framework, group)
                cfg = RunConfig(framework=framework, mode=mode, devices=1, threads=threads,
                                **tuned.applied(framework, mode, None, names))
                path = Path(tmp, f"{i}.json")
                record, done = runner.run_config(cfg.to_dict(), path, 600,
                                                 env=subprocess_env(threads))
                assert record, f"{framework} {names}: {done}"
                out.append(record)
    finally:
        runner.run_worker = real
    return tuple(out)


@pytest.mark.parametrize("framework, name", [(f, n) for f, groups in SPLIT.items()
                                             for group in groups for n in group])
def test_a_setting_shows_its_effect(framework, name):
    """Seen with the setting, unseen without (its plant: the other process, where it is
    not applied); a setting labelled unseen, unseen in both (planted: its label left on
    a setting whose effect shows, e.g. Paddle's to-static, fails)."""
    if framework not in registry.installed():
        pytest.skip(f"{framework} is not installed")
    (s,) = settings.get(framework, [name])
    why = settings.why_not(s, "cpu")
    if why:
        pytest.skip(why)
    if name == "omp-affinity" and len(os.sched_getaffinity(0)) < 2:
        pytest.skip("OpenMP's binding to places shows on 2 CPUs or more; this process has 1")
    own = next(i for i, group in enumerate(SPLIT[framework]) if name in group)
    runs = _readings(framework)
    with_it, without = runs[own][name], runs[1 - own][name]
    readings = json.dumps({"with": with_it, "without": without}, indent=1)
    assert not without["seen"], readings
    assert with_it["seen"] is (NOT_SEEN not in s.what), readings
