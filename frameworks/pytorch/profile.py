"""The op-level profiler: torch.profiler on the CPU (and CUDA where a GPU runs), its
events in the common form, and the rules that map ATen and autograd names to the op
classes of common/results/profile.py.

On a GPU the step's time is the device's: the events are the GPU's kernels and copies,
each named by the outermost op that launched it on the host (so the same rules class
them), and what no kernel covers, "outside any op", is the GPU waiting on the host."""
from __future__ import annotations

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from common.core.contract import OpProfiler, STEP_MARK
from common.results.profile import CONTAINER, MARK_PREFIX, classify, compile_rules

# (regex searched in an event's name, op class): the first match wins. Autograd's
# evaluate_function wraps each backward node, which is the op; a backward node's name
# says which forward op it differentiates (ConvolutionBackward0, MmBackward0, ...).
RULES = (
    (r"^dlc-profile-step |^ProfilerStep#|^autograd::engine::evaluate_function: |"
     r"^## |^Torch-Compiled Region|^CompiledFunction", "container"),
    (r"ConvolutionBackward|aten::convolution_backward", "conv backward"),
    (r"aten::(conv2d|convolution|_convolution|mkldnn_convolution)\b", "conv forward"),
    # einsum and bmm: Keras's EinsumDense on torch (MultiHeadAttention's query, key,
    # value and output projections: dense layers); the suite's attention runs in
    # scaled_dot_product_attention. Only its math fallback (SDPBackend.MATH, which no
    # profiled run took) has a BmmBackward0 of its own, which would then count as dense
    (r"^(Mm|Addmm|Linear|Bmm)Backward|aten::linear_backward", "dense backward"),
    (r"aten::(linear|addmm|mm|matmul|bmm|einsum)\b", "dense forward"),
    (r"Pool\w*Backward|aten::(max|avg|adaptive_avg|adaptive_max)_pool\w*", "pooling"),
    (r"^(Relu|Sigmoid|Threshold)Backward|aten::(relu_?|sigmoid|threshold_backward|"
     r"sigmoid_backward)\b", "activation"),
    (r"BatchNorm\w*Backward|batch_norm", "batchnorm"),
    (r"LayerNorm\w*Backward|aten::(native_)?layer_norm(_backward)?\b", "layernorm"),
    # attention: scaled_dot_product_attention (the ViT's, nn.MultiheadAttention's and
    # Keras's on torch: one op forward, one node backward, whichever kernel it picks);
    # a plain softmax is attention's (its math fallback's _safe_softmax): every loss
    # here is log_softmax (the rule after)
    (r"ScaledDotProduct\w*Backward|aten::_?scaled_dot_product\w*|"
     r"aten::_(flash|efficient)_attention\w*|^(Safe)?SoftmaxBackward|"
     r"aten::(_safe_softmax|_?softmax|_softmax_backward_data)\b", "attention"),
    (r"^GeluBackward|aten::gelu(_backward)?\b", "gelu"),
    (r"(NllLoss|LogSoftmax|Softmax|CrossEntropy)\w*Backward|aten::(cross_entropy_loss|"
     r"log_softmax|_log_softmax|softmax|nll_loss\w*)\b", "softmax and loss"),
    (r"^Optimizer\.|aten::_foreach_|aten::sgd|^DistributedDataParallel\.zero_grad",
     "optimizer update"),
    (r"c10d::|gloo:|nccl:|allreduce|all_reduce|\bbroadcast\b|DistributedDataParallel\.forward",
     "communication"),
    (r"^(T|View|Reshape\w*|Permute|Transpose|UnsafeView|Expand|Squeeze|Unsqueeze|Clone|"
     r"ToCopy|Copy\w*)Backward|aten::(view|reshape|_reshape_alias|flatten|t|transpose|"
     r"permute|contiguous|copy_|to|_to_copy|clone|as_strided|expand|broadcast_to|detach|squeeze|"
     r"unsqueeze|alias|select|slice|index|narrow|_unsafe_view|resolve_conj|resolve_neg|"
     r"lift_fresh)\b|^detach$|cudaMemcpy|^Memcpy|^Memset", "copies and layout"),
    (r"^aten::|Backward\d*$|AccumulateGrad", "other named ops"),
)


class TorchProfiler(OpProfiler):
    rules = RULES

    def __init__(self, folder: str):
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
        self._prof = profile(activities=acts)

    def __enter__(self):
        self._prof.__enter__()
        return self

    def __exit__(self, *exc):
        self._prof.__exit__(*exc)

    def step(self, i: int):
        return record_function(STEP_MARK.format(i))

    def events(self) -> list[dict]:
        return events(self._prof.events(), self.rules)


def _event(e, name: str, thread: str) -> dict:
    return {"name": name, "start": float(e.time_range.start), "end": float(e.time_range.end),
            "thread": thread}


def events(function_events, rules) -> list[dict]:
    """torch.profiler's FunctionEvents in the common form. With device events (a GPU
    ran): the step marks, and each kernel, copy or memset on its stream named by the
    outermost host op of a class above its launch (the runtime call, cudaLaunchKernel or
    cudaMemcpyAsync, that shares the device event's id); a device event with no launch
    keeps its own name, so that it shows as unmapped. Without: every host event on its
    thread."""
    compiled = compile_rules(rules)
    # a GPU's copy of a host annotation (the step's mark, a record_function) is no op
    device = [e for e in function_events if e.device_type.name != "CPU"
              and not e.name.startswith(MARK_PREFIX) and classify(e.name, compiled) != CONTAINER]
    if not device:
        return [_event(e, e.name, f"cpu {e.thread}") for e in function_events]
    cpu = [e for e in function_events if e.device_type.name == "CPU"]
    # the runtime's launch calls: ids are shared with the device events they launched
    # (and with unrelated front-end ops, such as CUPTI's "Activity Buffer Request")
    launches = {e.id: e for e in cpu if e.name.startswith("cuda")}

    def launcher(k) -> str:
        # the outermost ancestor that is an op of a class: an event no rule maps (CUPTI's
        # "Activity Buffer Request", which the host's tree can make an op's parent) is none
        launch, name = launches.get(k.id), k.name
        op = launch.cpu_parent if launch is not None else None
        while op is not None:
            if classify(op.name, compiled) not in (CONTAINER, None):
                name = op.name
            op = op.cpu_parent
        return name
    return ([_event(e, e.name, "host") for e in cpu if e.name.startswith(MARK_PREFIX)]
            + [_event(k, launcher(k), f"{k.device_type.name.lower()} {k.device_index} {k.thread}")
               for k in device])


class Profile:
    def op_profiler(self, folder):
        return TorchProfiler(folder)
