"""The one epoch loop: warm-up, timing, evaluation and divergence, for every
framework, model and mode. Frameworks only supply a Trainer; modes say how it is
built; common.launch runs it in this process or in the ranks it starts."""
from __future__ import annotations

import time
from typing import Callable

import numpy as np

from common import models
from common.core.contract import Backend, Trainer
from common.core.plan import RunConfig
from common.facts import data as data_mod

# the first steps' losses a record keeps (the cross-framework agreement checks read them)
STEP_LOSSES_KEPT = 50


# The lane of a traced run's timeline (common/results/trace.py) that the loop's own
# spans go to: warm-up steps, epochs, the steps inside them, evaluations.
LANE = "training loop"


# A loss that grows past this many times the first step's counts as diverged.
DIVERGENCE_FACTOR = 100.0


def divergence(losses: np.ndarray, first: float) -> int | None:
    """Index of the first loss that is not finite or exceeds DIVERGENCE_FACTOR x the
    run's first loss, or None."""
    bad = ~np.isfinite(losses) | (np.abs(losses) > DIVERGENCE_FACTOR * abs(first))
    return int(np.argmax(bad)) if bad.any() else None


def _span(name: str, cat: str, start: float, end: float, **args) -> dict:
    return {"lane": LANE, "name": name, "cat": cat, "start": start, "end": end, **args}


class StepClock:
    """A traced run's on_step: each step's span, from the previous step's end to the
    device synchronised after this one (the synchronisation perturbs the run's times;
    an untraced run never builds one)."""

    def __init__(self, backend: Backend, spans: list, on_step: Callable[[], None]):
        self.backend, self.spans, self.on_step, self.step = backend, spans, on_step, 0
        self.last = time.perf_counter()

    def __call__(self) -> None:
        self.backend.synchronize()
        end = time.perf_counter()
        self.spans.append(_span(f"step {self.step}", "step", self.last, end, step=self.step))
        self.step += 1
        self.on_step()
        self.last = time.perf_counter()       # the progress line is no step's time



def warm_up(backend: Backend, trainer: Trainer, ds: data_mod.Dataset, batches, initial: tuple,
            spans: list | None = None, execution: str | None = None) -> list[float]:
    """The warm-up every timed run shares (compare's epochs, the profile's windows): one
    step per batch, each timed with the device synchronised (the first traces or
    compiles, where the execution does); then every replica goes back to the initial
    (params, state), so the run is unchanged. Returns each step's seconds."""
    secs = []
    for i in range(len(batches)):
        t_step = time.perf_counter()
        trainer.losses(trainer.train_epoch(ds.X_train, ds.y_train, batches[i:i + 1], lambda: None))
        backend.synchronize()
        end = time.perf_counter()
        secs.append(end - t_step)
        if spans is not None:
            spans.append(_span(f"warm-up step {i}", "warmup", t_step, end, execution=execution))
    trainer.load_params(*initial)
    return secs

def train(backend: Backend, trainer: Trainer, cfg: RunConfig, ds: data_mod.Dataset,
          on_step: Callable[[], None] = lambda: None, evaluate: bool = True,
          on_estimate: Callable[[float], None] = lambda s: None,
          on_evaluated: Callable[[], None] = lambda: None,
          link: Callable[[], dict] | None = None) -> dict:
    """Warm up, reset to the initial weights, then train and time cfg.epochs epochs.
    The device is synchronised before every clock read. With `link` (a node's byte
    counters, {"tx": n, "rx": n}), the result's "link_bytes" holds what its link carried
    within the timed epochs (read beside the clocks, evaluation left out). With
    cfg.trace, the result's "timeline" holds the spans (common/results/trace.py) and
    their common mark, the start of the first timed epoch; the device is then
    synchronised after every step."""
    model = models.get(cfg.model)
    params0, state0 = model.init_params(cfg.seed, cfg.init), model.init_state()
    orders = [data_mod.batch_order(len(ds.X_train), cfg.batch_size, e, cfg.seed)
              [: cfg.steps_per_epoch] for e in range(cfg.epochs)]
    X_test, y_test = ds.X_test[: cfg.eval_samples], ds.y_test[: cfg.eval_samples]
    out = {"sec_per_epoch": [], "train_loss": [], "step_losses": [], "test_accuracy_per_epoch": [],
           "eval_sec": []}

    # Warm-up (graph tracing, allocator growth) on the first batches, timed apart;
    # then every replica goes back to the initial weights so the run is unchanged.
    # Its last step, timed alone, gives the estimate a user sees before a long run.
    warmup = orders[0][: cfg.warmup_steps]
    spans = [] if cfg.trace else None
    backend.synchronize()
    t0 = time.perf_counter()
    step_secs = warm_up(backend, trainer, ds, warmup, (params0, state0), spans, cfg.execution)
    out["warmup_sec"] = time.perf_counter() - t0
    if len(warmup):
        out["estimated_sec_per_epoch"] = step_secs[-1] * len(orders[0])
        on_estimate(out["estimated_sec_per_epoch"])
    # What tracing and compiling cost, paid once: the first step over a later one's
    # time (a compiled execution compiles in its first step; an eager one's first
    # step only warms allocators and caches)
    out["compile_sec"] = max(0.0, step_secs[0] - step_secs[-1]) if len(step_secs) > 1 else None

    done = 0
    clock = StepClock(backend, spans, on_step) if spans is not None else None
    origin = None                    # the timeline's common mark
    carried = {"tx": 0, "rx": 0}
    for order in orders:
        backend.synchronize()
        before = link() if link else None
        t0 = time.perf_counter()
        if clock is not None:
            clock.last = t0
            origin = t0 if origin is None else origin
        handles = trainer.train_epoch(ds.X_train, ds.y_train, order, clock or on_step)
        backend.synchronize()
        end = time.perf_counter()
        if link:
            after = link()
            carried = {k: carried[k] + after[k] - before[k] for k in carried}
        out["sec_per_epoch"].append(end - t0)
        if spans is not None:
            spans.append(_span(f"epoch {len(out['sec_per_epoch'])}", "epoch", t0, end))
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
            pred = trainer.predict(X_test)       # NumPy: the device is done
            end = time.perf_counter()
            out["eval_sec"].append(end - t0)
            if spans is not None:
                spans.append(_span("evaluation", "eval", t0, end, images=len(X_test)))
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
    out["placement"] = trainer.placement()
    out["param_fingerprint"] = trainer.param_fingerprint()
    # A loss after the last update (the step losses come before each one): the run's first
    # batch at the final parameters, in evaluation mode (on the ranks that evaluate, as
    # predict does); None where it is not finite (a diverged run)
    first = orders[0][0] if orders and len(orders[0]) else None
    final = (float(model.cross_entropy(np.asarray(trainer.logits(ds.X_train[first]), np.float64),
                                       ds.y_train[first]).mean())
             if evaluate and first is not None else None)
    out["final_loss"] = final if final is not None and np.isfinite(final) else None
    if link:
        out["link_bytes"] = carried
    if spans is not None:            # with the trainer's own (all-reduce, pipeline stages)
        out["timeline"] = {"origin": origin, "spans": spans + list(getattr(trainer, "spans", []))}
    return out
