"""The Keras chapter's device-scopes example, defined once: a shared LSTM(64) encodes
two sequences of shape (140, 256), branch a on one device, branch b on another, and
their encodings are concatenated on the CPU ("device parallelism runs different parts
of one model on different devices; it suits models with a parallel architecture").

Here: the model (shapes, the parameter list in a common layout, the shared NumPy
initialisation, a float64 NumPy oracle of its forward and backward pass), the
synthetic task, the placements, the contract a framework's `scopes.py` implements
(`Scopes`), the driver that trains and times it on each placement and counts the
bytes that cross between devices, its record and its report.

The model, as the chapter and the Keras guide's follow-up give it::

    a, b: (N, T, D) -> h_a = LSTM(a), h_b = LSTM(b)    one LSTM, its weights shared
    z = concat(h_a, h_b) @ W + c                        (N, 1), on the merge device
    p = sigmoid(z); loss = mean binary cross-entropy     (Dense(1, sigmoid))

Common layout (gate order i, f, g, o; g is the cell candidate, Keras's and MXNet's
"c"): W_x (D, 4H), W_h (H, 4H), b (4H,), W (2H, 1), c (1,). The LSTM's output is its
last hidden state (Keras's return_sequences=False), from zero initial states.
The loss is the mean over the batch (Keras's default reduction), so the SGD step is
p -= lr * grad of that mean.
"""
from __future__ import annotations

import os
import statistics
import time
import traceback
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass
from typing import Any, Sequence

import numpy as np

from common.facts import registry
from common.facts.machine import env_info
from common.core.contract import NotApplicable

T, D, H = 140, 256, 64          # the chapter's sequences (140, 256) and LSTM(64)
PARAM_NAMES = ("W_x", "W_h", "b", "W", "c")
LSTM_PARAMS = 3                 # the first three are the shared LSTM's
FLOAT = 4                       # bytes of a float32

DEFAULT_STEPS, DEFAULT_BATCH, DEFAULT_LR, DEFAULT_WARMUP = 10, 32, 0.5, 2


def param_shapes(d: int = D, h: int = H) -> tuple:
    return ((d, 4 * h), (h, 4 * h), (4 * h,), (2 * h, 1), (1,))


def init_params(seed: int, d: int = D, h: int = H) -> list[np.ndarray]:
    """float32, as real frameworks do it: the LSTM's weights U(-1/sqrt(H), 1/sqrt(H))
    (PyTorch's LSTM default), its bias zero but the forget gate's 1 (Keras's
    unit_forget_bias); the head Glorot-uniform (Keras's Dense default), bias zero."""
    rng = np.random.default_rng(seed)
    k = 1 / np.sqrt(h)
    b = np.zeros(4 * h)
    b[h:2 * h] = 1.0
    limit = np.sqrt(6 / (2 * h + 1))
    params = [rng.uniform(-k, k, (d, 4 * h)), rng.uniform(-k, k, (h, 4 * h)), b,
              rng.uniform(-limit, limit, (2 * h, 1)), np.zeros(1)]
    return [p.astype(np.float32) for p in params]


# ---------------------------------------------------------------- the task
TASK = ("which sequence runs higher: each sequence is N(0, 1) noise (T x 256) plus a level "
        "drawn per sequence from U(-0.5, 0.5) and added to every entry; the label is 1 when "
        "sequence a's mean entry exceeds sequence b's (computed from the data). A shared "
        "encoder that reads the level, and a head that weighs h_a against h_b, solve it.")


def batch(seed: int, step: int, n: int, seq_len: int = T, d: int = D):
    """Batch `step` of the synthetic task: (Xa, Xb, y), float32, the same in every
    framework (drawn from the seed and the step alone)."""
    rng = np.random.default_rng([seed, step])
    levels = rng.uniform(-0.5, 0.5, (2, n, 1, 1))
    Xa = (rng.standard_normal((n, seq_len, d)) + levels[0]).astype(np.float32)
    Xb = (rng.standard_normal((n, seq_len, d)) + levels[1]).astype(np.float32)
    y = (Xa.mean(axis=(1, 2), dtype=np.float64) > Xb.mean(axis=(1, 2), dtype=np.float64))
    return Xa, Xb, y.astype(np.float32)


# ---------------------------------------------------------------- the NumPy oracle
def _sigmoid(x):
    return 0.5 * (1 + np.tanh(0.5 * x))


def lstm_forward(W_x, W_h, b, X):
    """Last hidden state of the LSTM over X (N, T, D) from zero states, and the
    cache for lstm_backward. float64."""
    n, steps, _ = X.shape
    h_size = W_h.shape[0]
    h, c = np.zeros((n, h_size)), np.zeros((n, h_size))
    pre = X @ W_x + b                                     # (N, T, 4H): the input part at once
    cache = []
    for t in range(steps):
        z = pre[:, t] + h @ W_h
        i, f = _sigmoid(z[:, :h_size]), _sigmoid(z[:, h_size:2 * h_size])
        g, o = np.tanh(z[:, 2 * h_size:3 * h_size]), _sigmoid(z[:, 3 * h_size:])
        c_new = f * c + i * g
        cache.append((h, c, i, f, g, o, c_new))
        h, c = o * np.tanh(c_new), c_new
    return h, cache


def lstm_backward(W_x, W_h, X, cache, dh):
    """Backpropagation through time: the gradients of W_x, W_h, b from dL/dh_T."""
    dc = np.zeros_like(dh)
    dz = np.empty(X.shape[:2] + (W_h.shape[1],))
    for t in reversed(range(len(cache))):
        h_prev, c_prev, i, f, g, o, c = cache[t]
        tc = np.tanh(c)
        dc = dc + dh * o * (1 - tc ** 2)
        dz[:, t] = np.concatenate([dc * g * i * (1 - i), dc * c_prev * f * (1 - f),
                                   dc * i * (1 - g ** 2), dh * tc * o * (1 - o)], axis=1)
        dh = dz[:, t] @ W_h.T
        dc = dc * f
    hs = np.stack([entry[0] for entry in cache], axis=1)  # h_{t-1} for each t
    return [np.einsum("ntd,ntk->dk", X, dz), np.einsum("nth,ntk->hk", hs, dz), dz.sum(axis=(0, 1))]


def loss_and_grads(params, Xa, Xb, y):
    """The whole model in float64: (mean binary cross-entropy, probabilities (N,),
    gradients of the mean loss in the common layout)."""
    W_x, W_h, b, W, c = (np.asarray(p, np.float64) for p in params)
    Xa, Xb, y = (np.asarray(v, np.float64) for v in (Xa, Xb, y))
    ha, cache_a = lstm_forward(W_x, W_h, b, Xa)
    hb, cache_b = lstm_forward(W_x, W_h, b, Xb)
    hab = np.concatenate([ha, hb], axis=1)
    z = (hab @ W + c)[:, 0]
    loss = float(np.mean(np.logaddexp(0, z) - y * z))    # BCE of sigmoid(z), stably
    p = _sigmoid(z)
    dz = (p - y)[:, None] / len(y)
    dhab = dz @ W.T
    h_size = W_h.shape[0]
    ga = lstm_backward(W_x, W_h, Xa, cache_a, dhab[:, :h_size])
    gb = lstm_backward(W_x, W_h, Xb, cache_b, dhab[:, h_size:])
    grads = [a + b_ for a, b_ in zip(ga, gb)] + [hab.T @ dz, dz.sum(axis=0)]
    return loss, p, grads


def sgd_steps(params, batches, lr: float):
    """The reference training in float64: each step's loss (before its update) and the
    parameters after the last."""
    params = [np.asarray(p, np.float64).copy() for p in params]
    losses = []
    for Xa, Xb, y in batches:
        loss, _, grads = loss_and_grads(params, Xa, Xb, y)
        losses.append(loss)
        for p, g in zip(params, grads):
            p -= lr * g
    return np.array(losses), params


# ---------------------------------------------------------------- placements
@dataclass(frozen=True)
class Placement:
    """Where each part runs, in the neutral device names: the two LSTM branches and
    the merge (concatenation, head, loss). The shared LSTM weights live on branch_a."""
    branch_a: str
    branch_b: str
    merge: str

    def devices(self) -> list[str]:
        return list(dict.fromkeys((self.branch_a, self.branch_b, self.merge)))

    def translated(self, to_framework) -> dict:
        """{"branch_a": ..., "branch_b": ..., "merge": ...} in the framework's device terms."""
        return {part: to_framework(device) for part, device in asdict(self).items()}


PLACEMENTS = ("one-device", "two-branch")
# TensorFlow/Keras logical CPU devices to make: the merge's and the two branches'
CPU_DEVICES = 3


def placements(num_gpus: int, distinct_cpu_devices: bool) -> dict[str, Placement | str]:
    """The chapter's two placements for a framework on this machine; a string is why
    a placement cannot run here (recorded as not-applicable).

    one-device: everything on the first GPU, else the CPU.
    two-branch: the chapter's: a on gpu:0, b on gpu:1, merge on the CPU. Without
    GPUs, the framework's own distinct CPU devices stand in (TensorFlow's logical
    devices, MXNet's contexts): a on cpu:1, b on cpu:2, merge on cpu:0; a framework
    with one CPU device (PyTorch, Paddle) runs all three parts on cpu:0 and says so.
    With one GPU there is no second device of that kind: not applicable (putting
    branch b on the CPU would measure the CPU's speed, not the split)."""
    one = Placement(*["gpu:0" if num_gpus else "cpu:0"] * 3)
    if num_gpus >= 2:
        two = Placement("gpu:0", "gpu:1", "cpu:0")
    elif num_gpus == 1:
        two = ("needs two GPUs for the chapter's placement (a on gpu:0, b on gpu:1); "
               "this machine has one")
    elif distinct_cpu_devices:
        two = Placement("cpu:1", "cpu:2", "cpu:0")
    else:
        two = Placement("cpu:0", "cpu:0", "cpu:0")
    return {"one-device": one, "two-branch": two}


def bytes_moved(placement: Placement, n: int, seq_len: int = T, d: int = D, h: int = H) -> dict:
    """Bytes that cross between distinct devices in one training step, from the shapes
    that cross (not measured): each branch's input batch from the host (the merge
    device, where the NumPy batch lives) to its branch; the shared LSTM weights from
    branch a's device to branch b's, and their gradient back (every framework here
    runs branch b on a copy of a's weights: an explicit copy in PyTorch, a read of a
    variable on another device in TensorFlow/Keras, a second context's copy in MXNet);
    each encoding (N, H) to the merge device, and its gradient back."""
    lstm_bytes = sum(int(np.prod(s)) for s in param_shapes(d, h)[:LSTM_PARAMS]) * FLOAT
    inputs = n * seq_len * d * FLOAT
    encoding = n * h * FLOAT
    parts = {
        "inputs": sum(inputs for br in (placement.branch_a, placement.branch_b)
                      if br != placement.merge),
        "shared_weights": 2 * lstm_bytes if placement.branch_b != placement.branch_a else 0,
        "encodings": sum(2 * encoding for br in (placement.branch_a, placement.branch_b)
                         if br != placement.merge),
    }
    return {"total": sum(parts.values()), **parts}


# ---------------------------------------------------------------- the contract
class Scopes(ABC):
    """The shared-LSTM model in one framework: frameworks/<name>/scopes.py defines
    `class Scopes(common.experiments.scopes.Scopes)` with only that framework's calls. `build`
    makes the model on a placement from the common-layout NumPy parameters; the
    other methods act on the model last built. NumPy crosses the interface in
    parameters, batches and gradients; `step` returns a framework scalar."""

    # Where the shared LSTM weights live and what is copied for branch b, for the record.
    sharing: str = ""

    def __init__(self, backend):
        self.backend = backend
        self.name = backend.name

    def setup(self, threads: int | None) -> None:
        """Configure the framework before first use: the CPU devices the placements
        name (where the framework makes several), threads."""
        self.backend.setup(cpu_devices=CPU_DEVICES, threads=threads)

    def placements(self) -> dict[str, Placement | str]:
        return placements(self.backend.num_gpus(), self.backend.distinct_cpu_devices)

    def placement_note(self, name: str, placement: Placement) -> str | None:
        """What a reader must know about a placement here (devices that are one)."""
        if name == "two-branch" and len(placement.devices()) == 1:
            return (f"{self.name} has one CPU device: both branches and the merge run on "
                    f"{placement.merge}, so this placement is the one-device model "
                    "(nothing crosses between devices)")
        return None

    @abstractmethod
    def build(self, params: Sequence[np.ndarray], placement: Placement) -> None:
        """The model on `placement`, its parameters set from `params` (common layout):
        the shared LSTM's on branch_a, the head's on merge."""

    @abstractmethod
    def load_params(self, params: Sequence[np.ndarray]) -> None:
        """Overwrite the built model's parameters (every copy) with `params`."""

    @abstractmethod
    def read_params(self) -> list[np.ndarray]:
        """The model's parameters in the common layout (the shared LSTM's from branch_a)."""

    @abstractmethod
    def forward_backward(self, Xa: np.ndarray, Xb: np.ndarray, y: np.ndarray
                         ) -> tuple[np.ndarray, float, list[np.ndarray]]:
        """Probabilities (N,), the mean loss and its gradients in the common layout
        (the shared LSTM's summed over both branches), without updating anything."""

    @abstractmethod
    def step(self, Xa: np.ndarray, Xb: np.ndarray, y: np.ndarray, lr: float) -> Any:
        """One SGD step (p -= lr * grad of the mean loss, every copy of the shared
        weights kept identical); returns the loss before the update, not waited for."""

    @abstractmethod
    def parts(self, Xa: np.ndarray, Xb: np.ndarray) -> tuple[Any, Any, Any, Any]:
        """A forward pass, nothing recorded for gradients: the framework's own arrays
        h_a, h_b, the output, and one of the shared LSTM's weight arrays (branch a's)."""

    def placed(self, Xa: np.ndarray, Xb: np.ndarray) -> dict[str, str]:
        """Where the framework actually ran each part, read back from its arrays."""
        return dict(zip(("branch_a", "branch_b", "merge", "weights"),
                        map(self.backend.device_of, self.parts(Xa, Xb))))

    def value(self, loss: Any) -> float:
        return float(np.asarray(self.backend.to_numpy(loss)).reshape(()))


def load(name: str) -> Scopes:
    """`frameworks.<name>.scopes.Scopes` bound to the framework's backend, imported on demand."""
    return registry.plugin(name, "scopes", Scopes)


# ---------------------------------------------------------------- the driver
RECORD_KEYS = ("framework", "framework_version", "placement", "devices", "distinct_devices",
               "status", "error", "note", "sharing", "task", "steps", "batch", "seq_len", "lr",
               "seed", "warmup", "threads", "warmup_s", "step_s", "step_median_s", "step_min_s",
               "step_max_s", "bytes_moved_per_step", "bytes_moved", "step_losses", "loss_first",
               "loss_last", "placed", "vs_one_device", "load_avg", "elapsed_s", "env")


@dataclass
class Config:
    framework: str
    steps: int = DEFAULT_STEPS
    batch: int = DEFAULT_BATCH
    lr: float = DEFAULT_LR
    seed: int = 0
    warmup: int = DEFAULT_WARMUP
    threads: int = 2
    seq_len: int = T

    def to_dict(self) -> dict:
        return asdict(self)


def new_record(cfg: Config, placement: str, **fields) -> dict:
    record = dict.fromkeys(RECORD_KEYS)
    record.update(framework=cfg.framework, placement=placement, status="failed", task=TASK,
                  steps=cfg.steps, batch=cfg.batch, seq_len=cfg.seq_len, lr=cfg.lr,
                  seed=cfg.seed, warmup=cfg.warmup, threads=cfg.threads, step_s=[],
                  step_losses=[])
    record.update(fields)
    return record


def record_filename(framework: str, placement: str) -> str:
    return f"{framework}-{placement}.scopes.json"


def train(scopes: Scopes, placement: Placement, cfg: Config, params) -> dict:
    """Build the model on `placement`, run the warm-up steps (on batches of their own,
    numbered after the timed ones;
    then the initial parameters are written back), then cfg.steps timed SGD steps,
    the devices synchronised before each clock read. Returns the measured fields."""
    sync = scopes.backend.synchronize
    t0 = time.perf_counter()
    scopes.build(params, placement)
    for w in range(cfg.warmup):
        scopes.value(scopes.step(*batch(cfg.seed, cfg.steps + w, cfg.batch, cfg.seq_len), lr=cfg.lr))
    scopes.load_params(params)
    sync()
    warmup_s = time.perf_counter() - t0
    times, handles = [], []
    for s in range(cfg.steps):
        Xa, Xb, y = batch(cfg.seed, s, cfg.batch, cfg.seq_len)   # made outside the clock
        sync()
        t0 = time.perf_counter()
        handles.append(scopes.step(Xa, Xb, y, cfg.lr))
        sync()
        times.append(time.perf_counter() - t0)
    losses = [scopes.value(h) for h in handles]
    Xa, Xb, _ = batch(cfg.seed, 0, 2, cfg.seq_len)
    moved = bytes_moved(placement, cfg.batch, cfg.seq_len)
    return {"warmup_s": warmup_s, "step_s": times, "step_median_s": statistics.median(times),
            "step_min_s": min(times), "step_max_s": max(times),
            "bytes_moved_per_step": moved["total"], "bytes_moved": moved,
            "step_losses": losses, "loss_first": losses[0], "loss_last": losses[-1],
            "placed": scopes.placed(Xa, Xb), "final_params": scopes.read_params()}


def run(cfg: Config, on_begin=None, on_record=None) -> list[dict]:
    """Both placements of one framework, in this process: a record each (failures
    and not-applicable placements are records too), handed to on_record as it is
    made (on_begin(placement) is called before each). The two-branch record says how
    far its step losses and final parameters are from the one-device run's."""
    env = env_info()
    records, finals = [], {}
    try:
        scopes = load(cfg.framework)
        scopes.setup(cfg.threads)
        version, where = scopes.backend.version(), scopes.placements()
    except Exception as e:  # noqa: BLE001 - recorded for both placements
        version, where = None, {p: e for p in PLACEMENTS}
    params = init_params(cfg.seed)
    for name in PLACEMENTS:
        placement = where[name]
        if on_begin:
            on_begin(name)
        record = new_record(cfg, name, framework_version=version, env=env)
        load_before, t0 = os.getloadavg()[0], time.perf_counter()
        if isinstance(placement, NotApplicable):      # a known gap (the facts' `scopes`)
            record.update(status="not-applicable", error=str(placement))
        elif isinstance(placement, Exception):
            record.update(error=f"{type(placement).__name__}: {placement}")
        elif isinstance(placement, str):
            record.update(status="not-applicable", error=placement)
        else:
            record.update(devices=asdict(placement), sharing=scopes.sharing,
                          distinct_devices=len(placement.devices()),
                          note=scopes.placement_note(name, placement))
            try:
                fields = train(scopes, placement, cfg, params)
                finals[name] = (fields["step_losses"], fields.pop("final_params"))
                record.update(fields, status="ok")
            except NotApplicable as e:
                record.update(status="not-applicable", error=str(e))
            except Exception as e:  # noqa: BLE001 - a failed placement is data
                record.update(error=f"{type(e).__name__}: {e}",
                              traceback=traceback.format_exc(limit=8))
        # the machine's 1-minute load average before and after: other work shows here
        record.update(load_avg=[load_before, os.getloadavg()[0]],
                      elapsed_s=time.perf_counter() - t0)
        if name == "two-branch" and len(finals) == 2:
            (la, pa), (lb, pb) = finals["one-device"], finals["two-branch"]
            record["vs_one_device"] = {
                "max_loss_diff": float(np.max(np.abs(np.subtract(la, lb)))),
                "max_param_diff": float(max(np.max(np.abs(a - b)) for a, b in zip(pa, pb)))}
        records.append(record)
        if on_record:
            on_record(record)
    return records
