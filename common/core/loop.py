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


class Untraced:
    """An untraced run's timeline: no spans, and steps that do not wait for the device."""
    spans = None

    def __init__(self, backend: Backend, on_step: Callable[[], None]):
        self.on_step = on_step

    def epoch_started(self, t0: float) -> None:
        pass

    def add(self, name: str, cat: str, start: float, end: float, **args) -> None:
        pass

    def result(self, trainer: Trainer) -> dict:
        return {}


class Traced(Untraced):
    """A traced run's timeline (cfg.trace): the loop's spans (common/results/trace.py)
    with the trainer's own (all-reduce, pipeline stages), and their common mark, the
    start of the first timed epoch; the device is synchronised after every step."""

    def __init__(self, backend: Backend, on_step: Callable[[], None]):
        self.spans, self.origin = [], None
        self.on_step = StepClock(backend, self.spans, on_step)

    def epoch_started(self, t0: float) -> None:
        self.on_step.last = t0
        self.origin = t0 if self.origin is None else self.origin

    def add(self, name: str, cat: str, start: float, end: float, **args) -> None:
        self.spans.append(_span(name, cat, start, end, **args))

    def result(self, trainer: Trainer) -> dict:
        return {"timeline": {"origin": self.origin,
                             "spans": self.spans + list(getattr(trainer, "spans", []))}}


class LinkBytes:
    """What a node's link carried within the timed epochs ({"tx": n, "rx": n}, read from
    its byte counters beside the clocks; evaluation left out)."""

    def __init__(self, read: Callable[[], dict] | None):
        self.read, self.carried, self.before = read, {"tx": 0, "rx": 0}, None

    def start(self) -> None:
        self.before = self.read() if self.read else None

    def stop(self) -> None:
        if self.read:
            after = self.read()
            self.carried = {k: self.carried[k] + after[k] - self.before[k] for k in self.carried}

    def result(self) -> dict:
        return {"link_bytes": self.carried} if self.read else {}


def _keep_losses(out: dict, losses: np.ndarray, done: int) -> bool:
    """An epoch's step losses into the result: its mean, the first STEP_LOSSES_KEPT of
    the run; True where the run diverged in it (the step and the last finite loss noted:
    the losses are read once per epoch, so that steps never wait for the host)."""
    bad = divergence(losses, losses[0] if done == 0 else out["first_loss"])
    out.setdefault("first_loss", float(losses[0]) if len(losses) else None)
    room = max(0, STEP_LOSSES_KEPT - len(out["step_losses"]))
    out["step_losses"] += [float(v) for v in losses[:room]]
    if bad is not None:
        finite = [float(v) for v in losses[:bad] if np.isfinite(v)]
        out["diverged_step"] = done + bad
        out["last_finite_loss"] = finite[-1] if finite else None
        return True
    out["train_loss"].append(float(np.mean(losses)))
    return False


def _note_target(out: dict, target: float | None) -> None:
    """The first epoch whose test accuracy reached cfg.target_accuracy, and the training
    time to its end (evaluation excluded); the run goes on to its epochs (every rank runs
    them all)."""
    if (target is not None and out.get("epochs_to_target") is None
            and out["test_accuracy_per_epoch"][-1] >= target):
        out["epochs_to_target"] = len(out["sec_per_epoch"])
        out["sec_to_target"] = sum(out["sec_per_epoch"])


def _final_loss(model, trainer: Trainer, X, y) -> float | None:
    """A loss after the last update (the step losses come before each one): the run's
    first batch at the final parameters, in evaluation mode; None where it is not finite
    (a diverged run)."""
    final = float(model.cross_entropy(np.asarray(trainer.logits(X), np.float64), y).mean())
    return final if np.isfinite(final) else None


def train(backend: Backend, trainer: Trainer, cfg: RunConfig, ds: data_mod.Dataset,
          on_step: Callable[[], None] = lambda: None, evaluate: bool = True,
          on_estimate: Callable[[float], None] = lambda s: None,
          on_evaluated: Callable[[], None] = lambda: None,
          link: Callable[[], dict] | None = None) -> dict:
    """Warm up, reset to the initial weights, then train and time cfg.epochs epochs.
    The device is synchronised before every clock read. With `link` (a node's byte
    counters), the result's "link_bytes" (LinkBytes); with cfg.trace, its "timeline"
    (Traced)."""
    model = models.get(cfg.model)
    params0, state0 = model.init_params(cfg.seed, cfg.init), model.init_state()
    orders = [data_mod.batch_order(len(ds.X_train), cfg.batch_size, e, cfg.seed)
              [: cfg.steps_per_epoch] for e in range(cfg.epochs)]
    X_test, y_test = ds.X_test[: cfg.eval_samples], ds.y_test[: cfg.eval_samples]
    out = {"sec_per_epoch": [], "train_loss": [], "step_losses": [], "test_accuracy_per_epoch": [],
           "eval_sec": []}
    timeline = (Traced if cfg.trace else Untraced)(backend, on_step)
    links = LinkBytes(link)

    # Warm-up (graph tracing, allocator growth) on the first batches, timed apart;
    # then every replica goes back to the initial weights so the run is unchanged.
    # Its last step, timed alone, gives the estimate a user sees before a long run.
    warmup = orders[0][: cfg.warmup_steps]
    backend.synchronize()
    t0 = time.perf_counter()
    step_secs = warm_up(backend, trainer, ds, warmup, (params0, state0), timeline.spans,
                        cfg.execution)
    out["warmup_sec"] = time.perf_counter() - t0
    if len(warmup):
        out["estimated_sec_per_epoch"] = step_secs[-1] * len(orders[0])
        on_estimate(out["estimated_sec_per_epoch"])
    # What tracing and compiling cost, paid once: the first step over a later one's
    # time (a compiled execution compiles in its first step; an eager one's first
    # step only warms allocators and caches)
    out["compile_sec"] = max(0.0, step_secs[0] - step_secs[-1]) if len(step_secs) > 1 else None

    done = 0
    for order in orders:
        backend.synchronize()
        links.start()
        t0 = time.perf_counter()
        timeline.epoch_started(t0)
        handles = trainer.train_epoch(ds.X_train, ds.y_train, order, timeline.on_step)
        backend.synchronize()
        end = time.perf_counter()
        links.stop()
        out["sec_per_epoch"].append(end - t0)
        timeline.add(f"epoch {len(out['sec_per_epoch'])}", "epoch", t0, end)
        if _keep_losses(out, trainer.losses(handles), done):
            break                   # diverged: the run ends with the epoch it shows in
        done += len(order)
        if evaluate:
            t0 = time.perf_counter()
            pred = trainer.predict(X_test)       # NumPy: the device is done
            end = time.perf_counter()
            out["eval_sec"].append(end - t0)
            timeline.add("evaluation", "eval", t0, end, images=len(X_test))
            on_evaluated()
            out["test_accuracy_per_epoch"].append(float((pred == y_test).mean()))
            _note_target(out, cfg.target_accuracy)
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
    # on the ranks that evaluate, as predict does
    first = orders[0][0] if orders and len(orders[0]) else None
    out["final_loss"] = (_final_loss(model, trainer, ds.X_train[first], ds.y_train[first])
                         if evaluate and first is not None else None)
    return {**out, **links.result(), **timeline.result(trainer)}
