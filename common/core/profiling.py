"""A few training steps under the framework's own op-level profiler (benchmarks.profile):
the same warm-up as the epoch loop (common/core/loop.py), then one window of steps timed
without the profiler and one with it, each a single train_epoch call with the device
synchronised before the clock is read, as compare times an epoch. Its result holds the
profiler's events (common/results/profile.py attributes them to op classes) and both
windows' times, so that the profiler's own cost shows."""
from __future__ import annotations

import tempfile
import time

from common import models
from common.core import loop
from common.core.contract import Backend, Trainer
from common.core.plan import RunConfig
from common.facts import data as data_mod


def profile(backend: Backend, trainer: Trainer, cfg: RunConfig, ds: data_mod.Dataset) -> dict:
    steps, warm = cfg.profile_steps, cfg.warmup_steps
    order = data_mod.batch_order(len(ds.X_train), cfg.batch_size, 0, cfg.seed)
    if len(order) < warm + 2 * steps:
        raise ValueError(f"{len(order)} batches per epoch are too few for {warm} warm-up "
                         f"and 2 x {steps} profiled steps")
    model = models.get(cfg.model)
    noop = lambda: None       # noqa: E731
    loop.warm_up(backend, trainer, ds, order[:warm],
                 (model.init_params(cfg.seed, cfg.init), model.init_state()))
    plain = order[warm:warm + steps]
    profiled = order[warm + steps:warm + 2 * steps]

    backend.synchronize()
    t0 = time.perf_counter()
    trainer.train_epoch(ds.X_train, ds.y_train, plain, noop)
    backend.synchronize()
    plain_sec = time.perf_counter() - t0
    with tempfile.TemporaryDirectory(prefix="dlc-profile-") as folder:
        with backend.op_profiler(folder) as prof:
            backend.synchronize()
            t0 = time.perf_counter()
            with prof.step(0):
                handles = trainer.train_epoch(ds.X_train, ds.y_train, profiled, noop)
                backend.synchronize()
            profiled_sec = time.perf_counter() - t0
        events = prof.events()
    losses = trainer.losses(handles)
    return {"profile_steps": steps, "plain_step_ms": 1e3 * plain_sec / steps,
            "profiled_step_ms": 1e3 * profiled_sec / steps, "rules": [list(r) for r in prof.rules],
            "nesting": prof.nesting,
            "events": events, "losses": [float(v) for v in losses]}
