"""The op-level profiler: paddle.profiler (the CPU, and the GPU where one runs), its
chrome trace read back into the common form, and the rules that map Paddle's event
names to the op classes of common/results/profile.py."""
from __future__ import annotations

import glob
import json
import os
import re

import paddle
from paddle import profiler

from common.core.contract import OpProfiler, STEP_MARK

# (regex searched in an event's name, op class): the first match wins. An eager op is
# `<op> pybind_imperative_func` (or `__mul__ pybind_patch_func` for an operator), which
# holds its `<op> dygraph` event; a backward node is `Global_<Op>GradNode` (holding its
# Local_ twin). Events of the layer, backward and optimizer categories are named
# "<category>: <name>" by PaddleProfiler.events (their own names are a layer's class or
# a bare "backward"). Compiled (paddle.jit.to_static): the calling thread waits in
# interpreter_core_run (the forward program) or Dy2StGradNode (its backward) while a
# worker thread runs the program's `pd_op.<op>` instructions.
RULES = (
    (r"^dlc-profile-step |^ProfileStep#|^Forward: |^Backward: |^Dataloader: |"
     r"^backward$|^interpreter_core_run$|^(Global|Local)_Dy2StGradNode", "container"),
    (r"Conv2d\w*GradNode|^(pd_op\.)?(depthwise_)?conv2d\w*_grad", "conv backward"),
    (r"^(pd_op\.)?(depthwise_)?conv2d\b", "conv forward"),
    (r"MatmulGradNode|^(pd_op\.)?matmul\w*_grad", "dense backward"),
    (r"^(pd_op\.)?(matmul|linear)\b", "dense forward"),
    (r"Pool2dGradNode|^(pd_op\.)?pool2d", "pooling"),
    (r"(Relu|Sigmoid)\w*GradNode|^(pd_op\.)?(relu|sigmoid)(_grad)?_?\b", "activation"),
    (r"BatchNorm\w*GradNode|^(pd_op\.)?(sync_)?batch_norm", "batchnorm"),
    (r"LayerNorm\w*GradNode|^(pd_op\.)?layer_norm", "layernorm"),
    # a softmax of its own is attention's (the ViT's written out, nn.MultiHeadAttention's):
    # the loss is cross_entropy_with_softmax, one op. Attention's products q k^T and
    # weights v are matmuls, named as the dense layers' are: dense
    (r"^(Global|Local)_SoftmaxGradNode|^(pd_op\.)?softmax(_grad)?_?\b", "attention"),
    (r"Gelu\w*GradNode|^(pd_op\.)?gelu", "gelu"),
    (r"(CrossEntropy|Softmax)\w*GradNode|^(pd_op\.)?(cross_entropy|softmax|log_softmax)",
     "softmax and loss"),
    # scratch's sgd and allreduce: RecordEvents of frameworks/paddle/scratch.py
    (r"^Optimization: |^sgd$|^(pd_op\.)?sgd_?\b", "optimizer update"),
    (r"^allreduce$|^(pd_op\.)?(c_)?(all_?reduce|broadcast)", "communication"),
    (r"(Reshape|Flatten|Expand|Transpose|Squeeze|Unsqueeze|Assign|Cast)\w*GradNode|^(pd_op\.)?"
     r"(reshape|flatten|expand|transpose|squeeze|unsqueeze|assign|cast|slice|concat|"
     r"to_tensor|copy_to|memcpy|share_data|view)", "copies and layout"),
    # the rest: eager ops, backward nodes (GradNodeAccumulation adds into .grad), an
    # op's inner events where no outer one holds them (the first gradient's fill), a
    # compiled program's other instructions and its executor's own steps
    (r" pybind_(imperative|patch)_func$|^(Global|Local)_\w*GradNode| (dygraph|kernel launch|"
     r"infer_meta|node_creation)$|^pd_op\.|^builtin_\w*instruction$|"
     r"^get_interpretercore_cache$|^fetch_and_gc$|^construct_grad_tensor$", "other named ops"),
)

# "[1.234 ms]", the duration Paddle's chrome trace appends to every name
_DURATION = re.compile(r"\[[0-9.]+ [mun]?s\]$")
# "4967(Python)" and "4967(C++)": two tracks of one thread
_TRACK = re.compile(r"\((Python|C\+\+)\)$")
# categories whose events are named by category (their own names say too little)
_BY_CATEGORY = ("Forward", "Backward", "Optimization", "Dataloader")


class PaddleProfiler(OpProfiler):
    rules = RULES

    def __init__(self, folder: str):
        self._folder = folder
        self._targets = [profiler.ProfilerTarget.CPU]
        if paddle.is_compiled_with_cuda() and paddle.device.cuda.device_count():
            self._targets.append(profiler.ProfilerTarget.GPU)

    def __enter__(self):
        # made here: export_chrome_tracing creates its folder when called
        self._prof = profiler.Profiler(targets=self._targets,
                                       on_trace_ready=profiler.export_chrome_tracing(self._folder))
        self._prof.start()
        return self

    def __exit__(self, *exc):
        self._prof.stop()

    def step(self, i: int):
        return profiler.RecordEvent(STEP_MARK.format(i))

    def events(self) -> list[dict]:
        traces = glob.glob(os.path.join(self._folder, "*.json"))
        if len(traces) != 1:
            raise RuntimeError(f"paddle.profiler wrote {len(traces)} traces to {self._folder}, not 1")
        with open(traces[0]) as f:
            trace = json.load(f)["traceEvents"]
        out = []
        for e in trace:
            if e.get("ph") != "X":
                continue
            name = _DURATION.sub("", e["name"])
            if e.get("cat") in _BY_CATEGORY:
                name = f"{e['cat']}: {name}"
            out.append({"name": name, "start": float(e["ts"]), "end": float(e["ts"]) + float(e["dur"]),
                        "thread": f"{e['pid']} {_TRACK.sub('', str(e['tid']))}"})
        return out


class Profile:
    def op_profiler(self, folder):
        return PaddleProfiler(folder)
