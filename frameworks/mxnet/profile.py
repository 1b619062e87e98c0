"""The op-level profiler: mxnet.profiler (symbolic and imperative operators) dumped as a
Chrome trace, its events in the common form, and the rules that map MXNet's operator
names to the op classes of common/results/profile.py.

MXNet runs each operator on an engine thread as an event of its own only with engine
bulking off: bulked, a hybridized graph's forward or backward runs as one event named by
the ops it joins ("Activation,Pooling,Convolution,...") and eager autograd's as
"ImperativeBulk". Bulking is read when libmxnet loads, so a profiled run's process
starts with it off (common/facts/registry.py `profile_env`, set by registry.get)."""
from __future__ import annotations

import contextlib
import functools
import json
import os
from collections import defaultdict

from mxnet import profiler

from common.core.contract import OpProfiler, STEP_MARK
from common.facts import registry

# The domain of the suite's own annotations (step marks, scratch's sgd and allreduce)
DOMAIN = "dlc"

# (regex searched in an event's name, op class): the first match wins. Backward
# operators are "_backward_<forward op>"; a hybridized graph and eager ops give the same
# operator names (Activation / relu, FullyConnected / dot).
RULES = (
    (r"^dlc-profile-step |^WaitForVar$", "container"),
    (r"^_backward_Convolution$", "conv backward"),
    (r"^Convolution$", "conv forward"),
    (r"^_backward_(FullyConnected|dot)$", "dense backward"),
    (r"^(FullyConnected|dot)$", "dense forward"),
    (r"^(_backward_)?Pooling$", "pooling"),
    (r"^(_backward_)?(Activation|relu|sigmoid)$", "activation"),
    (r"^(_backward_)?(BatchNorm|SyncBatchNorm|_contrib_SyncBatchNorm)$", "batchnorm"),
    (r"^(_backward_)?LayerNorm$", "layernorm"),
    # attention (d2l's, frameworks/mxnet/models.py): batch_dot forward and backward (its
    # gradient is batch_dots too) and a softmax of its own; the loss is log_softmax and pick
    (r"^(_backward_)?(batch_dot|softmax)$", "attention"),
    # LeakyReLU is nn.GELU (act_type "gelu"); no model here has a leaky ReLU
    (r"^(_backward_)?LeakyReLU$", "gelu"),
    (r"^(_backward_)?(log_softmax|SoftmaxOutput|softmax_cross_entropy|pick)$",
     "softmax and loss"),
    # scratch's sgd (frameworks/mxnet/scratch.py), gluon.Trainer's multi_sgd_update
    (r"^sgd$|^(multi_)?(mp_)?sgd(_mom)?_update$|^(preloaded_)?multi_sgd", "optimizer update"),
    (r"^allreduce$", "communication"),
    (r"^(_backward_)?(copy|_copy|_copyto|Flatten|Reshape|reshape|transpose|SwapAxis|"
     r"expand_dims|squeeze|slice|slice_axis|Concat|concat|_slice_assign\w*|_crop_assign\w*|"
     r"Cast|cast)$|^Copy\w+2\w+$",
     "copies and layout"),
    # bias and elementwise arithmetic, reductions, fills, the engine's frees
    (r"^(_backward_)?(_?(plus|minus|mul|div|add|sub|rminus|rdiv)(_scalar)?|elemwise_\w+|"
     r"_?broadcast_\w+|mean|sum|add_n|ElementWiseSum|_full|_zeros|_ones|zeros_like|"
     r"ones_like)$|^DeleteVariable$|^SetValueOp$", "other named ops"),
)


@contextlib.contextmanager
def annotate(name: str):
    """`name` in mxnet.profiler's trace (a Task of the suite's domain, on the calling
    thread) around the block: what the Python thread does there, as RULES map `name`."""
    task = _task(name)
    task.start()
    try:
        yield
    finally:
        task.stop()


@functools.lru_cache(maxsize=None)
def _task(name: str) -> profiler.Task:
    # one Task per name, started and stopped each time (MXNet never frees a Domain)
    return profiler.Task(_domain(), name)


@functools.lru_cache(maxsize=None)
def _domain() -> profiler.Domain:
    return profiler.Domain(DOMAIN)


def trace_events(text: str) -> list[dict]:
    """The Chrome-trace events of one dump. dump(finished=False) writes the events since
    the process's last dump (a finished dump ends the profiler for the process: the next
    session writes nothing); the process's first dump opens with the trace's header, and
    none closes the list."""
    if '"traceEvents"' in text:
        text = text[text.index("[", text.index('"traceEvents"')) + 1:]
    if '"displayTimeUnit"' in text:
        text = text[:text.rindex("]")]
    return json.loads("[" + text.strip().strip(",") + "]")


def read_trace(text: str) -> list[dict]:
    """A dump's events in the common form. Engine operators are B/E pairs per device
    process and thread; the suite's annotations are async b/e pairs of its domain, on the
    thread that started them (the operator domain's b/e pairs repeat the operators).
    A thread is one thread whatever its process (the Python thread runs operators too:
    DeleteVariable), so events are keyed by thread alone."""
    open_ = defaultdict(list)
    out = []
    for e in trace_events(text):
        ph = e.get("ph", "")
        if ph not in ("B", "E", "b", "e") or (ph in "be" and e.get("cat") != DOMAIN):
            continue
        key = (ph in "BE", e["pid"], e.get("id"), e["tid"], e["name"])
        if ph in "Bb":
            open_[key].append(e["ts"])
        elif open_[key]:
            out.append({"name": e["name"], "start": float(open_[key].pop()),
                        "end": float(e["ts"]), "thread": str(e["tid"])})
    return out


class MXNetProfiler(OpProfiler):
    rules = RULES

    def __init__(self, folder: str):
        self._path = os.path.join(folder, "mxnet-profile.json")
        self._events: list[dict] | None = None

    def __enter__(self):
        env = registry.facts("mxnet").profile_env
        off = {k: v for k, v in env.items() if os.environ.get(k) != v}
        if off:
            raise RuntimeError(f"mxnet.profiler sees operators one by one only with {env} set "
                               f"before mxnet loads (registry.get(..., profiled=True)); here "
                               f"{ {k: os.environ.get(k) for k in off} }")
        profiler.set_config(profile_symbolic=True, profile_imperative=True,
                            profile_memory=False, profile_api=False, aggregate_stats=False,
                            filename=self._path)
        profiler.set_state("run")
        return self

    def __exit__(self, *exc):
        profiler.set_state("stop")
        profiler.dump(finished=False)

    def step(self, i: int):
        return annotate(STEP_MARK.format(i))

    def events(self) -> list[dict]:
        if self._events is None:
            with open(self._path) as f:
                self._events = read_trace(f.read())
        return self._events


class Profile:
    def op_profiler(self, folder):
        return MXNetProfiler(folder)
