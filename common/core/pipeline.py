"""Model mode's trainer, written once for every framework: the model's units cut into k
stages (stage i on device i; the cut, the schedules' orders and what they predict are
common/core/schedules.py), and a pipelined step on the backend's stage primitives
(stage_forward, stage_backward, to_device or send/recv, sgd).

A step cuts the batch into M micro-batches (common.facts.data.shard_bounds). Each
micro-batch goes forward through stages 0..k-1, each stage's output handed over to
the next stage's device (detached: the next stage's input records its own
gradient), and backward through k-1..0, the gradient of each stage's input handed
back. The schedule says in which order each stage runs its forwards and backwards
(stage_ops): GPipe, every forward and then every backward in reverse; 1F1B
(PipeDream-Flush), a few warm-up forwards, then one forward and one backward in turn,
so that stage s holds at most min(k-s, M) micro-batches' activations instead of M.
The parameters' gradients add up over the micro-batches, and one SGD step scaled by
the full batch ends the step: for a model without BatchNorm that is the 1-device
step on the full batch, for any M and either schedule (the sums in another order).
BatchNorm normalises each micro-batch by itself (and updates its running statistics
once per micro-batch, in each stage's forward order, 0..M-1 in both schedules; MXNet
updates them in the backward pass: M-1..0 with GPipe, 0..M-1 with 1F1B).

Stages live in one process where the framework has distinct devices there (GPUs,
MXNet's CPU contexts, TensorFlow's logical CPU devices; PyTorch and Paddle stages
may also share cpu:0), handed over with to_device, and run one after another in an
order where every input is ready (serial_order); else one process per stage
(PyTorch and Paddle on a CPU, started by common.launch.launcher), each running its
own stage's ops with send/recv (rank_ops: a recv waits, and a send may wait for its
receive, so 1F1B's sends are ordered so that no two stages wait for each other).
InProcess or Processes hands activations and gradients over.

Each stage's busy time (its forwards, backwards and SGD; the device synchronised
around each), the hand-over time and the step's wall time give the measured bubble:
the idle share 1 - sum(busy) / (k x wall), against (k-1)/(M+k-1), both schedules'
for equal stages run at once. In one process the stages run one after another, so
the measured bubble there is near (k-1)/k whatever M or schedule. Each of those
clocked intervals is also kept as a span (trainer.spans: the last step's). Each tape
is watched through a weak reference: a stage's peak in-flight micro-batches (and
their activation bytes) are the most of its tapes still alive at once, referenced by
whatever holds them (the loop, the backend, a leak), not a count the loop keeps."""
from __future__ import annotations

import time
import weakref
from typing import Sequence

import numpy as np

from common import models
from common.core.contract import Backend, NotApplicable, Trainer
from common.core.schedules import (SCHEDULES, activation_bytes_calculated, bytes_between_stages,
                                   check_order, check_rendezvous, gpipe_bubble,
                                   in_flight_predicted, rank_ops, serial_order, stages,
                                   with_handovers)
from common.facts.data import shard_bounds

class Tape(list):
    """A tape that the backend gave as a tuple, as a list: a weak reference can watch a
    list subclass (a tuple cannot be watched), and it unpacks as the tuple did."""


def watchable(tape):
    """The tape as the loop keeps it: a tuple made a Tape, anything else as it is (it
    must take a weak reference: JAX's vjp function does)."""
    return Tape(tape) if type(tape) is tuple else tape


class InProcess:
    """Hand-over between stages of one process: to_device onto the next stage's device."""

    def __init__(self, backend: Backend, devices: dict[int, str]):
        self.b, self.devices, self.box = backend, devices, {}

    def send(self, x, src: int, dst: int, key) -> None:
        self.box[dst, key] = self.b.to_device(x, self.devices[dst])

    def recv(self, dst: int, src: int, key, shape) -> object:
        return self.box.pop((dst, key))


    def wait(self) -> None:
        pass


class Processes:
    """Hand-over between stages in processes of their own: the backend's send/recv. A
    send starts and the stage goes on (PyTorch's gloo isend returns at once; Paddle's
    returns once the peer receives, which rank_ops orders for); wait() at the end of
    the step waits until every one has gone."""

    def __init__(self, backend: Backend, devices: dict[int, str]):
        self.b, self.devices, self.pending = backend, devices, []

    def send(self, x, src: int, dst: int, key) -> None:
        self.pending.append((self.b.send(x, dst), x))

    def recv(self, dst: int, src: int, key, shape) -> object:
        return self.b.recv(shape, src, self.devices[dst])

    def wait(self) -> None:
        for handle, _ in self.pending:
            handle.wait()
        self.pending = []


# what a span's name says, its category (the Chrome trace's "cat")
SPAN_KINDS = {"F": "forward", "B": "backward", "send act": "handover", "send grad": "handover",
              "sgd": "sgd"}
# perf_counter is CLOCK_MONOTONIC on Linux: one clock for every process of the machine
# (model mode runs on one), so the ranks' spans line up as measured; elsewhere each
# rank's spans are aligned on its own step start
SHARED_CLOCK = "CLOCK_MONOTONIC" in time.get_clock_info("perf_counter").implementation


def rank_rows(rows: np.ndarray, counts) -> list[np.ndarray]:
    """Each rank's span rows out of the gathered block (rank x most x 5, padded): its
    first `counts[rank]`."""
    return [rows[r, :int(n)] for r, n in enumerate(counts)]


class PipelineTrainer(Trainer):
    """Model mode's trainer: in one process every stage (devices: one per stage), or in
    rank r of a run with a process per stage, stage r alone (devices: its one device).

    trainer.spans: the last step's clocked intervals, one dict each: lane ("stage 0
    (cpu:0)"), name ("F3", "B3", "send act 3", "send grad 3", "sgd"), cat
    (SPAN_KINDS), start and end (perf_counter seconds), micro_batch (None for sgd) and
    step (steps since the trainer was built): this process's stages' (a traced run's
    timeline reads them, common/results/trace.py). With a process per stage, figures()
    gathers every rank's into rank 0's record (on the shared clock, SHARED_CLOCK)."""

    def __init__(self, backend: Backend, model: str, params, state, devices: Sequence[str],
                 lr: float, micro_batches: int, rank: int = 0, world: int = 1,
                 schedule: str = "gpipe"):
        if schedule not in SCHEDULES:
            raise NotApplicable(f"unknown schedule {schedule!r}; choose from: {', '.join(SCHEDULES)}")
        self.backend, self.model, self.lr, self.M = backend, model, lr, micro_batches
        self.schedule, self.world = schedule, world
        self.stages = stages(model, world if world > 1 else len(devices))
        k = len(self.stages)
        self.local = [rank] if world > 1 else list(range(k))
        self.devices = dict(zip(self.local, devices))
        self.link = (Processes if world > 1 else InProcess)(backend, self.devices)
        self.replicas = {s: backend.stage_replica(params, state, self.devices[s], model, self.stages[s])
                         for s in self.local}
        self.params0 = [np.asarray(p) for p in params]
        # what this process runs, in order: every stage's ops (one process), or its own
        # stage's with sends that may wait for their receive (checked for every rank)
        if world == 1:
            order = serial_order(schedule, k, micro_batches)
            check_order(order, schedule, k, micro_batches)
            self.ops = with_handovers(order, k)
        else:
            lists = [rank_ops(schedule, k, s, micro_batches) for s in range(k)]
            check_rendezvous(lists)
            self.ops = lists[rank]
        self.batch, self.bounds, self.steps = None, None, 0
        self.tape_bytes: dict[tuple[int, int], int] = {}     # (stage, rows) -> one tape's bytes
        self.tape_bytes_by = None                            # measured by what (None: calculated)
        # per local stage, a weak reference to each tape made and its bytes
        self.watched: dict[int, list] = {s: [] for s in self.local}
        self._reset_figures()

    def _reset_figures(self) -> None:
        self.timings: list[list[float]] = []    # per step: wall, hand-over, busy per local stage
        # per local stage, the most tapes (micro-batches) and tape bytes alive at once
        self.peak_tapes = dict.fromkeys(self.local, 0)
        self.peak_bytes = dict.fromkeys(self.local, 0)
        self.spans: list[dict] = []
        self.step_start = None

    @property
    def last(self) -> int:
        return len(self.stages) - 1

    def _clock(self) -> float:
        self.backend.synchronize()
        return time.perf_counter()

    def _in_shape(self, s: int, rows: int) -> tuple:
        """Shape of stage s's input as the framework holds it (what recv allocates)."""
        return (rows, *self.stages[s - 1].out_shape)

    def _lane(self, s: int) -> str:
        # another rank's stage: on the CPU too (a process per stage only runs without GPUs)
        return f"stage {s} ({self.devices.get(s, self.devices[self.local[0]])})"

    def _new_span(self, s: int, kind: str, t0: float, t1: float, m: int | None,
                  step: int) -> dict:
        name = kind if m is None else f"{kind}{m}" if len(kind) == 1 else f"{kind} {m}"
        return {"lane": self._lane(s), "name": name, "cat": SPAN_KINDS[kind], "start": t0,
                "end": t1, "micro_batch": m, "step": step}

    def _span(self, s: int, kind: str, t0: float, t1: float, m: int | None = None) -> None:
        self.spans.append(self._new_span(s, kind, t0, t1, m, self.steps))

    def _forward(self, s: int, r, x, labels, rows: int):
        """stage_forward, the first time at this stage and micro-batch size with its tape's
        bytes measured where the backend can (else calculated)."""
        b = self.backend
        if (s, rows) in self.tape_bytes:
            out, tape = b.stage_forward(r, x, labels)
            return out, watchable(tape)
        (out, tape), nbytes = b.measure_tape(r, lambda: b.stage_forward(r, x, labels))
        if nbytes is None:
            nbytes = activation_bytes_calculated(self.model, self.stages[s], rows)
        else:
            self.tape_bytes_by = b.tape_bytes_by
        self.tape_bytes[s, rows] = nbytes
        return out, watchable(tape)

    def _watch(self, s: int, tape, nbytes: int) -> None:
        """Watch stage s's new tape and take the stage's peak of its tapes alive at once
        (this one and those still referenced) and of their bytes. Only a forward adds a
        tape, so the peak is reached at one."""
        alive = [(ref, n) for ref, n in self.watched[s] if ref() is not None]
        alive.append((weakref.ref(tape), nbytes))
        self.watched[s] = alive
        self.peak_tapes[s] = max(self.peak_tapes[s], len(alive))
        self.peak_bytes[s] = max(self.peak_bytes[s], sum(n for _, n in alive))

    def step(self, X, y):
        b, last = self.backend, self.last
        bounds = shard_bounds(len(X), self.M)
        self.batch, self.bounds = len(X), bounds
        busy, hand, tapes, losses, started = dict.fromkeys(self.local, 0.0), 0.0, {}, [], set()
        self.spans = []                         # the last step's only: memory stays bounded
        self.step_start = start = self._clock()
        inputs, outs = {}, {}       # received and to be sent, by (stage, kind, m)
        for s, op, m in self.ops:
            lo, hi = bounds[m]
            r = self.replicas[s]
            if op == "recv act":
                inputs[s, "act", m] = self.link.recv(s, s - 1, ("act", m), self._in_shape(s, hi - lo))
            elif op == "recv grad":
                inputs[s, "grad", m] = self.link.recv(s, s + 1, ("grad", m),
                                                      self._in_shape(s + 1, hi - lo))
            elif op.startswith("send"):
                kind = op[5:]
                t = self._clock()
                self.link.send(outs.pop((s, kind, m)), s, s + 1 if kind == "act" else s - 1, (kind, m))
                t1 = self._clock()
                hand += t1 - t
                self._span(s, op, t, t1, m)
            elif op == "F":
                x = b.tensor(X[lo:hi], r.device) if s == 0 else inputs.pop((s, "act", m))
                labels = b.tensor(y[lo:hi], r.device) if s == last else None
                t = self._clock()
                out, tapes[s, m] = self._forward(s, r, x, labels, hi - lo)
                t1 = self._clock()
                busy[s] += t1 - t
                self._span(s, "F", t, t1, m)
                self._watch(s, tapes[s, m], self.tape_bytes[s, hi - lo])
                if s == last:
                    losses.append(out)
                else:
                    outs[s, "act", m] = out
            else:
                grad = None if s == last else inputs.pop((s, "grad", m))
                t = self._clock()
                # `first`: this stage's first backward of the step (GPipe's is M-1, 1F1B's
                # 0), which starts the gradient sums from zero where the backend keeps them
                g_in = b.stage_backward(r, tapes.pop((s, m)), grad, first=s not in started)
                t1 = self._clock()
                started.add(s)
                busy[s] += t1 - t
                self._span(s, "B", t, t1, m)
                if s > 0:
                    outs[s, "grad", m] = g_in
        for s in self.local:                                  # one SGD step on the summed gradients
            t = self._clock()
            b.stage_sgd(self.replicas[s], self.lr / len(X))
            t1 = self._clock()
            busy[s] += t1 - t
            self._span(s, "sgd", t, t1)
        self.link.wait()
        self.timings.append([self._clock() - start, hand, *busy.values()])
        self.steps += 1
        return sum(losses[1:], losses[0]) / len(X) if losses else None     # all on the last stage's device

    def losses(self, handles):
        b = self.backend
        b.synchronize()
        mine = np.array([float(np.asarray(b.to_numpy(h)).reshape(())) if h is not None else 0.0
                         for h in handles])
        return b.gather_floats(mine)[self.last] if self.world > 1 else mine

    def logits(self, X):
        b, last = self.backend, self.last
        logits = None
        for s in self.local:
            r = self.replicas[s]
            h = (b.tensor(X, r.device) if s == 0
                 else self.link.recv(s, s - 1, "eval", self._in_shape(s, len(X))))
            out, _ = b.stage_forward(r, h, training=False)
            if s < last:
                self.link.send(out, s, s + 1, "eval")
            else:
                logits = b.to_numpy(out)
        self.link.wait()
        if self.world > 1:       # the last stage's logits, on every rank
            shape = (len(X), *self.stages[last].out_shape)
            mine = logits.ravel() if logits is not None else np.zeros(int(np.prod(shape)))
            logits = b.gather_floats(mine)[last].reshape(shape)
        return logits

    def _whole(self) -> tuple[list, list]:
        if self.world > 1:
            raise NotApplicable("the stages live in processes of their own: each holds its part")
        model = models.get(self.model)
        params, state = list(self.params0), [None] * len(model.STATE_NAMES)
        for s, r in self.replicas.items():
            ps, ss = self.backend.read_stage(r)
            for i, p in zip(self.stages[s].params, ps):
                params[i] = p
            for j, v in zip(self.stages[s].state, ss):
                state[j] = v
        return params, state

    def replica_params(self):
        return [self._whole()[0]]        # one model, cut across the devices

    def param_fingerprint(self):
        if self.world == 1:
            return super().param_fingerprint()
        # each rank holds its stages' parameters and state: their fingerprints, gathered
        # (every rank's row is zero but for its own tensors; the state's rows follow the
        # parameters', as in the base class)
        n, width = len(self.params0), 1 + models.FINGERPRINT_PARTS
        mine = np.zeros((n + len(models.get(self.model).STATE_NAMES), width))
        for s, r in self.replicas.items():
            params, state = self.backend.read_stage(r)
            own = [*self.stages[s].params, *(n + j for j in self.stages[s].state)]
            mine[own] = models.fingerprint([*params, *state], own)
        gathered = self.backend.gather_floats(mine.ravel()).sum(axis=0)
        return gathered.reshape(len(mine), width).tolist()

    def replica_state(self):
        return [self._whole()[1]]

    def load_params(self, params, state):
        for r in self.replicas.values():
            self.backend.write_stage(r, params, state)
        self._reset_figures()

    def _memory(self) -> dict:
        """Per local stage: the most tapes alive at once (watched) and their bytes, and the
        formulas' figures for the last step's micro-batches."""
        k, rows = len(self.stages), [hi - lo for lo, hi in self.bounds or []]
        out = {}
        for s in self.local:
            n = in_flight_predicted(self.schedule, k, s, self.M)
            # the peak holds micro-batches 0..n-1 (1F1B) or all (GPipe): the largest first
            out[s] = [self.peak_tapes[s], self.peak_bytes[s], n,
                      sum(self.tape_bytes.get((s, r), 0) for r in rows[:n])]
        return out

    def _span_rows(self) -> np.ndarray:
        """The last step's spans as numbers: stage, kind (index in SPAN_KINDS), micro-batch
        (-1: none), start and end after this process's step start."""
        kinds, lanes = list(SPAN_KINDS), {self._lane(s): s for s in self.local}
        return np.array([[lanes[x["lane"]], kinds.index(x["name"].rstrip("0123456789 ")),
                          -1 if x["micro_batch"] is None else x["micro_batch"],
                          x["start"] - self.step_start, x["end"] - self.step_start]
                         for x in self.spans], np.float64).reshape(-1, 5)

    def _gather_spans(self) -> list[dict]:
        """Every rank's last-step spans, for rank 0 ([] elsewhere; a collective: every
        rank calls it), on the shared clock where there is one (SHARED_CLOCK), else each
        rank's aligned on rank 0's step start."""
        mine = self._span_rows()
        heads = self.backend.gather_floats([len(mine), self.step_start or 0.0, self.steps - 1])
        most = int(heads[:, 0].max())
        padded = np.full((most, 5), np.nan)
        padded[:len(mine)] = mine
        rows = self.backend.gather_floats(padded.ravel()).reshape(self.world, most, 5)
        starts = heads[:, 1] if SHARED_CLOCK else np.full(self.world, heads[0, 1])
        if self.local[0] != 0:
            return []
        kinds = list(SPAN_KINDS)
        every = [self._new_span(int(s), kinds[int(kind)], starts[r] + t0, starts[r] + t1,
                                None if m < 0 else int(m), int(heads[r, 2]))
                 for r, part in enumerate(rank_rows(rows, heads[:, 0]))
                 for s, kind, m, t0, t1 in part]
        return sorted(every, key=lambda x: x["start"])

    def spans_record(self, spans: list[dict]) -> dict | None:
        """The last step's spans, compactly, for the record: the lanes, and per span [lane
        index, name, category, micro-batch, start, end] in seconds after the step's
        start (rank 0's), to the microsecond."""
        if not spans:
            return None
        t0 = self.step_start
        lanes = [self._lane(s) for s in range(len(self.stages))]
        return {"step": spans[0]["step"], "clock": (
                    "one process" if self.world == 1 else
                    "one clock for every process (perf_counter: CLOCK_MONOTONIC)" if SHARED_CLOCK
                    else "each rank's spans aligned on its own step start"),
                "lanes": lanes, "wall": round(self.timings[-1][0], 6) if self.timings else None,
                "spans": [[lanes.index(x["lane"]), x["name"], x["cat"], x["micro_batch"],
                           round(x["start"] - t0, 6), round(x["end"] - t0, 6)] for x in spans]}

    def figures(self) -> dict:
        k, local = len(self.stages), np.array(self.timings, np.float64).reshape(len(self.timings), -1)
        memory, spans = self._memory(), self.spans
        if self.world > 1:       # every rank's per-step (wall, hand-over, busy) side by side
            rows = self.backend.gather_floats(local.ravel()).reshape(self.world, len(local), 3)
            wall, hand, busy = rows[:, :, 0].max(axis=0), rows[:, :, 1].sum(axis=0), rows[:, :, 2].T
            memory = dict(enumerate(self.backend.gather_floats(memory[self.local[0]])))
            spans = self._gather_spans() if self.step_start is not None else []
        else:
            wall, hand, busy = local[:, 0], local[:, 1], local[:, 2:]
        bubble = 1 - busy.sum(axis=1) / (k * wall) if len(wall) else []
        med = (lambda v: float(np.median(v)) if len(v) else None)
        timed = bool(self.timings)
        return {"micro_batches": self.M, "schedule": self.schedule,
                "stages": [s.describe() for s in self.stages],
                "stage_devices": [d for _, d in sorted(self.devices.items())] if self.world == 1
                                 else [self.devices[self.local[0]]] * k,
                "stage_sec": [med(busy[:, s]) for s in range(k)] if len(busy) else None,
                "handover_sec": med(hand), "bubble": med(bubble),
                "bubble_gpipe": gpipe_bubble(k, self.M),
                "bytes_between_stages": bytes_between_stages(self.stages, self.batch or 0),
                "stage_peak_micro_batches": [int(memory[s][0]) for s in range(k)] if timed else None,
                "stage_peak_micro_batches_predicted": [int(memory[s][2]) for s in range(k)],
                "stage_activation_bytes": [int(memory[s][1]) for s in range(k)] if timed else None,
                "stage_activation_bytes_predicted": ([int(memory[s][3]) for s in range(k)]
                                                     if timed else None),
                "activation_bytes_source": (
                    f"measured: {self.backend.tape_bytes_by}" if self.tape_bytes_by else
                    "calculation: each stage's input and its units' outputs, float32 (a lower "
                    "bound: the tape keeps each layer's intermediates too)"),
                "pipeline_spans": self.spans_record(spans)}
