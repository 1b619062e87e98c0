"""The op-level profile's checks, run in each framework's conformance process (no
start-up of their own): a few LeNet steps under the framework's own profiler
(common/core/profiling.py), attributed by its rules; then the same with a pause planted
between steps (it must land outside any op and in no class) and with every ReLU applied
many times over (tests/helpers/profile_plants.py: it must land in the activation class, or
outside any op, and in no other)."""
from __future__ import annotations

import contextlib
import time

from common.core import profiling
from common.core.contract import NotApplicable
from common.core.modes import MODES
from common.core.plan import RunConfig
from common.facts import data
from common.results import profile
from tests.helpers.profile_plants import ACTIVATION

STEPS = 3
BATCH = 32
PAUSE = 0.2                   # seconds planted between steps: well above a loaded machine's noise
SPILL = 0.5                   # the most of the planted activation any other class may gain
DATA = data.synthetic(0, n_train=BATCH * 12, n_test=BATCH)


def _profile(b, plant=contextlib.nullcontext, pause: float = 0.0) -> dict:
    cfg = RunConfig(framework=b.name, mode="native", devices=1, batch_size=BATCH,
                    dataset="synthetic", profile_steps=STEPS, warmup_steps=2)
    mode = MODES["native"]
    with plant():
        trainer = mode.trainer(b, cfg, mode.devices(b, 1))
        if pause:
            epoch = trainer.train_epoch
            trainer.train_epoch = lambda X, y, order, on_step: epoch(
                X, y, order, lambda: (on_step(), time.sleep(pause)))
        result = profiling.profile(b, trainer, cfg, DATA)
    a = profile.of_run(result)
    assert a["why_untrusted"] is None, a["why_untrusted"]
    return a


def _changes(before: dict, after: dict) -> dict:
    classes = set(before["classes"]) | set(after["classes"])
    out = {c: after["classes"].get(c, 0.0) - before["classes"].get(c, 0.0) for c in classes}
    out[profile.OUTSIDE] = after["outside"] - before["outside"]
    return out


def profiles_its_steps(b) -> str | None:
    """The checks (AssertionError where one fails); the reason where the framework has no
    profiler (the conformance check then shows as skipped with it)."""
    try:
        b.op_profiler("")
    except NotApplicable as e:
        return str(e)
    base = _profile(b)
    for cls in ("conv forward", "dense forward", "optimizer update"):
        assert base["classes"].get(cls, 0) > 0, f"no {cls} in {base['classes']}"
    assert any(c.startswith("conv backward") and v > 0 for c, v in base["classes"].items()), \
        base["classes"]
    # a pause between steps: outside any op, in no class
    pause_ms = 1e3 * PAUSE
    d = _changes(base, _profile(b, pause=PAUSE))
    assert d[profile.OUTSIDE] > 0.7 * pause_ms, f"a {pause_ms:.0f} ms pause moved {d}"
    grew = {c: v for c, v in d.items() if c != profile.OUTSIDE and v > 0.3 * pause_ms}
    assert not grew, f"a pause between steps landed in op classes: {grew}"
    # every ReLU many times over: activation, or outside any op (the calls' dispatch)
    if b.name not in ACTIVATION:
        raise AssertionError(f"tests/helpers/profile_plants.py has no planted activation for {b.name}")
    d = _changes(base, _profile(b, ACTIVATION[b.name]))
    act = d.get("activation", 0.0)
    assert act > 2.0, f"ReLU x many moved activation by {act:.2f} ms: {d}"
    # other classes may grow a little: an engine that runs ops on several threads at once
    # (MXNet's, XLA's pool) shares each instant among the ops that overlap it, so more
    # ReLUs overlapping a convolution take some of its time and give it some of theirs
    # (idle 2-core Intel, MXNet: pooling +4.4 and conv backward +5.6 ms for activation
    # +16.8); a ReLU's rule gone puts half or more of it elsewhere (+6.2 against +0.0)
    grew = {c: v for c, v in d.items() if c not in ("activation", profile.OUTSIDE)
            and v > SPILL * act}
    assert not grew, f"ReLU x many landed in other classes: {grew} (activation +{act:.1f} ms)"
    return None
