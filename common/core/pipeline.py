"""Model mode, written once for every framework: the model's units cut into k stages
(stage i on device i, common.models.stage_cuts), and a GPipe step on the backend's
stage primitives (stage_forward, stage_backward, to_device or send/recv, sgd).

A step cuts the batch into M micro-batches (common.facts.data.shard_bounds). Every
micro-batch goes forward through stages 0..k-1, each stage's output handed over to
the next stage's device (detached: the next stage's input records its own
gradient); then backward in reverse, the gradient of each stage's input handed back.
The parameters' gradients add up over the micro-batches, and one SGD step scaled by
the full batch ends the step: for a model without BatchNorm that is the 1-device
step on the full batch, for any M. BatchNorm normalises each micro-batch by itself
(and updates its running statistics once per micro-batch).

Stages live in one process where the framework has distinct devices there (GPUs,
MXNet's CPU contexts, TensorFlow's logical CPU devices; PyTorch and Paddle stages
may also share cpu:0), handed over with to_device; else one process per stage
(PyTorch and Paddle on a CPU, started by common.launch.launcher) and send/recv. The loop
below is the same for both: InProcess or Processes hands activations and gradients over.

Each stage's busy time (its forwards, backwards and SGD; the device synchronised
around each), the hand-over time and the step's wall time give the measured bubble:
the idle share 1 - sum(busy) / (k x wall), against GPipe's (k-1)/(M+k-1) for equal
stages run at once. In one process the stages run one after another, so the
measured bubble there is near (k-1)/k whatever M."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from common import models
from common.core.contract import Backend, NotApplicable, Trainer
from common.facts.data import shard_bounds

FLOAT_BYTES = 4


@dataclass(frozen=True)
class Stage:
    index: int
    units: tuple[int, int]           # the model's UNITS lo..hi-1
    names: tuple[str, ...]           # their names
    params: tuple[int, ...]          # indices in the model's PARAM_NAMES
    state: tuple[int, ...]           # indices in its STATE_NAMES
    out_shape: tuple[int, ...]       # output per image, common layout (NCHW)

    def describe(self) -> str:
        return self.names[0] if len(self.names) == 1 else f"{self.names[0]}..{self.names[-1]}"


def stages(model_name: str, k: int) -> list[Stage]:
    """The k stages of a model, cut as common.models.stage_cuts."""
    model = models.get(model_name)
    try:
        cuts = models.stage_cuts(model, k)
    except ValueError as e:
        raise NotApplicable(str(e)) from None
    out = []
    for i, (lo, hi) in enumerate(cuts):
        units = model.UNITS[lo:hi]
        out.append(Stage(i, (lo, hi), tuple(u[0] for u in units),
                         tuple(p for u in units for p in u[1]), tuple(s for u in units for s in u[2]),
                         tuple(units[-1][3])))
    return out


def gpipe_bubble(k: int, micro_batches: int) -> float:
    """GPipe's idle share with k equal stages and M micro-batches: (k-1)/(M+k-1)."""
    return (k - 1) / (micro_batches + k - 1)


def bytes_between_stages(stage_list: Sequence[Stage], batch: int) -> list[int]:
    """Bytes sent across each stage boundary per step: the activations forward and
    their gradients back, float32, for the whole batch (all micro-batches)."""
    return [2 * FLOAT_BYTES * batch * int(np.prod(s.out_shape)) for s in stage_list[:-1]]


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
    """Hand-over between stages in processes of their own: the backend's send/recv.
    Sends do not block the stage (it goes on with the next micro-batch); wait() at the
    end of the step waits until every one has gone."""

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


class PipelineTrainer(Trainer):
    """Model mode's trainer: in one process every stage (devices: one per stage), or in
    rank r of a run with a process per stage, stage r alone (devices: its one device)."""

    def __init__(self, backend: Backend, model: str, params, state, devices: Sequence[str],
                 lr: float, micro_batches: int, rank: int = 0, world: int = 1):
        self.backend, self.model, self.lr, self.M = backend, model, lr, micro_batches
        self.world = world
        self.stages = stages(model, world if world > 1 else len(devices))
        self.local = [rank] if world > 1 else list(range(len(self.stages)))
        self.devices = dict(zip(self.local, devices))
        self.link = (Processes if world > 1 else InProcess)(backend, self.devices)
        self.replicas = {s: backend.stage_replica(params, state, self.devices[s], model, self.stages[s])
                         for s in self.local}
        self.params0 = [np.asarray(p) for p in params]
        self.batch = None
        self.timings: list[list[float]] = []    # per step: wall, hand-over, busy per local stage

    @property
    def last(self) -> int:
        return len(self.stages) - 1

    def _clock(self) -> float:
        self.backend.synchronize()
        return time.perf_counter()

    def _in_shape(self, s: int, rows: int) -> tuple:
        """Shape of stage s's input as the framework holds it (what recv allocates)."""
        return (rows, *self.stages[s - 1].out_shape)

    def step(self, X, y):
        b, last = self.backend, self.last
        bounds = shard_bounds(len(X), self.M)
        self.batch = len(X)
        busy, hand, tapes, losses = dict.fromkeys(self.local, 0.0), 0.0, {}, []
        start = self._clock()
        for m, (lo, hi) in enumerate(bounds):                 # forward, micro-batch by micro-batch
            for s in self.local:
                r = self.replicas[s]
                x = (b.tensor(X[lo:hi], r.device) if s == 0
                     else self.link.recv(s, s - 1, ("act", m), self._in_shape(s, hi - lo)))
                labels = b.tensor(y[lo:hi], r.device) if s == last else None
                t = self._clock()
                out, tapes[s, m] = b.stage_forward(r, x, labels)
                busy[s] += self._clock() - t
                if s == last:
                    losses.append(out)
                else:
                    t = self._clock()
                    self.link.send(out, s, s + 1, ("act", m))
                    hand += self._clock() - t
        for m in reversed(range(len(bounds))):                # backward, in reverse
            lo, hi = bounds[m]
            for s in reversed(self.local):
                r = self.replicas[s]
                grad = (None if s == last else
                        self.link.recv(s, s + 1, ("grad", m), self._in_shape(s + 1, hi - lo)))
                t = self._clock()
                g_in = b.stage_backward(r, tapes.pop((s, m)), grad, first=m == len(bounds) - 1)
                busy[s] += self._clock() - t
                if s > 0:
                    t = self._clock()
                    self.link.send(g_in, s, s - 1, ("grad", m))
                    hand += self._clock() - t
        for s in self.local:                                  # one SGD step on the summed gradients
            t = self._clock()
            b.stage_sgd(self.replicas[s], self.lr / len(X))
            busy[s] += self._clock() - t
        self.link.wait()
        self.timings.append([self._clock() - start, hand, *busy.values()])
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
        # each rank holds its stages' parameters: their fingerprints, gathered (every
        # rank's row is zero but for its own parameters)
        n = len(self.params0)
        mine = np.zeros((n, 2))
        for s, r in self.replicas.items():
            params, _ = self.backend.read_stage(r)
            own = self.stages[s].params
            mine[list(own)] = models.fingerprint(params, own)
        return self.backend.gather_floats(mine.ravel()).sum(axis=0).reshape(n, 2).tolist()

    def replica_state(self):
        return [self._whole()[1]]

    def load_params(self, params, state):
        for r in self.replicas.values():
            self.backend.write_stage(r, params, state)
        self.timings = []

    def figures(self) -> dict:
        k, local = len(self.stages), np.array(self.timings, np.float64).reshape(len(self.timings), -1)
        if self.world > 1:       # every rank's per-step (wall, hand-over, busy) side by side
            rows = self.backend.gather_floats(local.ravel()).reshape(self.world, len(local), 3)
            wall, hand, busy = rows[:, :, 0].max(axis=0), rows[:, :, 1].sum(axis=0), rows[:, :, 2].T
        else:
            wall, hand, busy = local[:, 0], local[:, 1], local[:, 2:]
        bubble = 1 - busy.sum(axis=1) / (k * wall) if len(wall) else []
        med = (lambda v: float(np.median(v)) if len(v) else None)
        return {"micro_batches": self.M, "stages": [s.describe() for s in self.stages],
                "stage_devices": [d for _, d in sorted(self.devices.items())] if self.world == 1
                                 else [self.devices[self.local[0]]] * k,
                "stage_sec": [med(busy[:, s]) for s in range(k)] if len(busy) else None,
                "handover_sec": med(hand), "bubble": med(bubble),
                "bubble_gpipe": gpipe_bubble(k, self.M),
                "bytes_between_stages": bytes_between_stages(self.stages, self.batch or 0)}
