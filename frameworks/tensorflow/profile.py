"""The op-level profiler: TensorFlow's own (tf.profiler.experimental), its trace read
back from the XSpace it writes (TensorFlow's xplane_pb2), its events in the common
form, and the rules that map TensorFlow's op events to the op classes of
common/results/profile.py."""
from __future__ import annotations

import bisect
import contextlib
import glob
import os

import tensorflow as tf
from tensorflow.tsl.profiler.protobuf import xplane_pb2

from common.core.contract import OpProfiler, STEP_MARK
from common.results.profile import CONTAINER, classify, compile_rules

# (regex searched in an event's name, op class): the first match wins. An op's event
# names its type after a colon: "NODE:TYPE" for a graph's kernel (the node's name with
# its name scopes), "EagerLocalExecute: TYPE" for an eager op (which has no node name);
# a type may carry oneDNN's prefix (_MklNative, _MklFused...). The runtime's
# own events (Python API calls, eager dispatch, a tf.function call, the executor running
# a function's nodes) hold the ops and are none themselves. Name scopes first: the
# suite's "sgd" and "allreduce" (frameworks/tensorflow/scratch.py, native.py) and
# MirroredStrategy's "update_<i>" hold arithmetic that is the update or the reduction.
RULES = (
    (r"^dlc-profile-step |^tf\.function|^tf\.\w+$|^convert_to_tensor$|"
     r"^EagerLocalExecute: __inference_|"
     r"^(EagerExecute|EagerKernelExecute|EagerCopyToDevice|ValidateInputTypeAndPlacement|"
     r"TFE_\w+|KernelAndDevice(Func|Op)::Run|FunctionRun|ExecutorState::Process|"
     r"ExecutorDoneCallback|ExecutorState::ProcessAsync::\w+|ParallelFor|Memory(Allocation|Deallocation))$",
     "container"),
    (r"^sgd$|^sgd/|/sgd/|^update_\d+(_\d+)?/", "optimizer update"),
    (r"^allreduce$|^allreduce/|/allreduce/|"
     r"(?<!:): ?(CollectiveReduce\w*|NcclAllReduce\w*)$", "communication"),
    (r"(?<!:): ?(_Mkl\w*?)?Conv2DBackpropInput\w*$", "conv backward input"),
    (r"(?<!:): ?(_Mkl\w*?)?Conv2DBackpropFilter\w*$", "conv backward weight"),
    (r"(?<!:): ?(_Mkl\w*?|_Fused)?(Depthwise)?Conv2D\w*$", "conv forward"),
    # a product's gradient: TensorFlow's gradient functions run under "gradient_tape/"
    (r"(^|/)gradient_tape/.*(?<!:): ?(_Mkl\w*?)?(MatMul|BatchMatMul\w*)$", "dense backward"),
    (r"(?<!:): ?(_Mkl\w*?|_Fused)?(MatMul|BatchMatMul\w*)$", "dense forward"),
    (r"(?<!:): ?(_Mkl\w*?)?(AvgPool|MaxPool)\w*$", "pooling"),
    (r"(?<!:): ?(_Mkl\w*?)?(Relu|ReluGrad|Relu6|Relu6Grad|Sigmoid|SigmoidGrad)$", "activation"),
    (r"(?<!:): ?(_Mkl\w*?)?FusedBatchNorm\w*$", "batchnorm"),
    # A dense layer on a batch of tokens (x @ W, x of rank 3; Keras's EinsumDense) is a
    # BatchMatMulV2, whose weight gradient is then summed over the batch: the layer's
    (r"(^|/)gradient_tape/(\w+/)*[Mm]at[Mm]ul(_\d+)?/Sum(_\d+)?:Sum$", "dense backward"),
    # The ViT's LayerNorm (frameworks/tensorflow/models.py _layer_norm, no name scope):
    # tf.nn.moments and rsqrt, the only ones at the graph's top level, and their
    # gradients; its centring, scaling and shift are sub, mul and add named as every
    # other elementwise op is: other named ops
    (r"^(gradient_tape/)?(moments(_\d+)?/|Rsqrt(Grad)?(_\d+)?:)", "layernorm"),
    # attention: a Softmax of its own (every model's loss is the fused
    # SparseSoftmaxCrossEntropyWithLogits) and its gradient, (g - sum(g * s)) * s, whose
    # ops the tape names gradient_tape/{mul,Sum,sub}_N, with no scope of their own where
    # the Softmax is at the graph's top level (the ViT's). Names do not tell those apart
    # from another top-level op's gradient: in these models only the class token's Tile
    # has one, gradient_tape/Sum_2, 0.002 of the 0.06-0.08 ms per step these names took
    # (vit, batch 16, scratch and native). Attention's products (q k^T, weights v) are
    # BatchMatMulV2s, named as the dense layers' are (matmul_N, MatMul_N): dense
    (r"(?<!:): ?(_Mkl)?Softmax$|^gradient_tape/(mul|Sum|sub)(_\d+)?:(Mul|Sum|Sub)$",
     "attention"),
    # tf.nn.gelu's ops, in its name scope, and their gradients
    (r"(^|/)Gelu(_\d+)?/", "gelu"),
    (r"(?<!:): ?(Sparse)?(SoftmaxCrossEntropyWithLogits|LogSoftmax)$", "softmax and loss"),
    # tf.data making the batches (Keras's fit): the input pipeline copies them
    (r"^Iterator::|^IteratorGetNextOp::|(?<!:): ?(IteratorGetNext|MakeIterator|\w+Dataset(V\d)?|"
     r"AnonymousIterator\w*|Optional(HasValue|GetValue|FromValue|None)|DatasetCardinality)$",
     "copies and layout"),
    (r"(?<!:): ?(_Mkl\w*?)?(Identity|IdentityN|Transpose|Reshape|Shape|ShapeN|Squeeze|"
     r"ExpandDims|Slice|StridedSlice|ConcatV2|Pack|Unpack|Cast|ReadVariableOp|_EagerConst|"
     r"Const|Fill|ZerosLike|OnesLike|Tile|BroadcastTo|_Arg|_Retval|_Send|_Recv|_HostSend|"
     r"_HostRecv)$", "copies and layout"),
    (r"(?<!:): ?[A-Z_]\w*$", "other named ops"),
)


@contextlib.contextmanager
def annotate(name: str):
    """`name` in TensorFlow's profile around code the suite writes (scratch's sgd and
    allreduce): a name scope, for the graph's kernels, and a trace annotation, for eager
    ops (which carry no node name); neither changes what runs."""
    with tf.name_scope(name), tf.profiler.experimental.Trace(name):
        yield


def _stats(plane, event) -> dict:
    out = {}
    for s in event.stats:
        which = s.WhichOneof("value")
        v = getattr(s, which) if which else None
        out[plane.stat_metadata[s.metadata_id].name] = (
            plane.stat_metadata[v].name if which == "ref_value" else v)
    return out


def read_xspace(path: str, rules=RULES) -> list[dict]:
    space = xplane_pb2.XSpace()
    with open(path, "rb") as f:
        space.ParseFromString(f.read())
    return xspace_events(space, rules)


def xspace_events(space, rules=RULES) -> list[dict]:
    """Every timed event of an XSpace in the common form, thread "PLANE LINE". A thread
    pool's task on a worker thread (between ThreadpoolListener's StartRegion and
    StopRegion, holding no op of its own: at most a ParallelFor) is named after the op
    that scheduled it: the innermost op event (by `rules`) holding the Record whose
    producer id is the task's consumer id, followed through tasks that schedule tasks.
    So Eigen's and oneDNN's pieces of a convolution are that convolution."""
    compiled = compile_rules(rules)
    by_thread, records, regions = {}, {}, []
    for plane in space.planes:
        if not plane.name.startswith(("/host:", "/device:")):
            continue
        for line in plane.lines:
            thread = f"{plane.name} {line.id}"
            base = line.timestamp_ns * 1e-3
            timed, opened = by_thread.setdefault(thread, []), None
            for e in line.events:
                name = plane.event_metadata[e.metadata_id].name
                start = base + e.offset_ps * 1e-6
                end = start + e.duration_ps * 1e-6
                if name == "ThreadpoolListener::Record":
                    st = _stats(plane, e)
                    records[(st.get("_pt"), st.get("_p"))] = (thread, start)
                elif name == "ThreadpoolListener::StartRegion":
                    st = _stats(plane, e)
                    opened = (start, (st.get("_ct"), st.get("_c")))
                elif name == "ThreadpoolListener::StopRegion" and opened:
                    regions.append((opened[0], start, thread, opened[1]))
                    opened = None
                elif end > start:
                    if "tf_function_call" in _stats(plane, e):
                        name = "tf.function " + name     # the Python function's own name
                    timed.append({"name": name, "start": start, "end": end, "thread": thread})
            timed.sort(key=lambda e: e["start"])
    # per thread, its op events by start: an instant's holder is the latest-starting op
    # that lasts past it, among those that started at most the thread's longest op before
    cls = {}
    for evs in by_thread.values():
        for e in evs:
            if e["name"] not in cls:
                cls[e["name"]] = classify(e["name"], compiled)
    ops = {t: [e for e in evs if cls[e["name"]] != CONTAINER] for t, evs in by_thread.items()}
    op_starts = {t: [e["start"] for e in evs] for t, evs in ops.items()}
    longest = {t: max((e["end"] - e["start"] for e in evs), default=0.0) for t, evs in ops.items()}
    tasks = {t: [] for t in by_thread}        # the tasks named so far, per thread, by start

    def holder(thread, at):
        named = tasks[thread]
        i = bisect.bisect_right(named, at, key=lambda e: e["start"])
        if i and named[i - 1]["end"] > at:    # a named task holds no op of its own
            return named[i - 1]
        evs, i = ops[thread], bisect.bisect_right(op_starts[thread], at)
        while i > 0 and evs[i - 1]["start"] >= at - longest[thread]:
            i -= 1
            if evs[i]["end"] > at:
                return evs[i]
        return None

    for lo, hi, thread, consumer in sorted(regions):     # a task before the tasks it schedules
        i = bisect.bisect_left(op_starts[thread], lo)
        if consumer not in records or (i < len(op_starts[thread]) and op_starts[thread][i] < hi):
            continue                          # an executor's task: its own ops count
        op = holder(*records[consumer])
        if op is not None:
            tasks[thread].append({"name": op["name"], "start": lo, "end": hi, "thread": thread})
    by_thread = {t: evs + tasks[t] for t, evs in by_thread.items()}
    return [e for evs in by_thread.values() for e in evs]


class TFProfiler(OpProfiler):
    rules = RULES

    def __init__(self, folder: str):
        self.folder = folder

    def __enter__(self):
        tf.profiler.experimental.start(self.folder)
        return self

    def __exit__(self, *exc):
        tf.profiler.experimental.stop()

    def step(self, i: int):
        return tf.profiler.experimental.Trace(STEP_MARK.format(i))

    def events(self) -> list[dict]:
        found = glob.glob(os.path.join(self.folder, "plugins", "profile", "*", "*.xplane.pb"))
        if len(found) != 1:
            raise RuntimeError(f"TensorFlow's profiler wrote {len(found)} traces under "
                               f"{self.folder}, not one")
        return read_xspace(found[0], self.rules)


class Profile:
    def op_profiler(self, folder):
        return TFProfiler(folder)
