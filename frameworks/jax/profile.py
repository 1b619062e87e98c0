"""The op-level profiler: jax.profiler's trace (its .xplane.pb, read back with
jax.profiler.ProfileData), its events in the common form, and the rules that map them
to the op classes of common/results/profile.py. XLA names a device event after the HLO
instruction it runs (`hlo_op`), mostly a fusion named by what XLA fused
(`ynn_fusion.11`): each is renamed by the op it fuses around, read from the live
executables' compiled HLO text (common/results/hlo.py), e.g. "convolution backward:
jit(step)/transpose(jvp())/conv_general_dilated @ conv2d". Keras on JAX uses this
profiler too: what is model-specific belongs in the rules, not in the class."""
from __future__ import annotations

import glob
import os

import jax

from common.core.contract import OpProfiler, STEP_MARK
from common.results.profile import MARK_PREFIX
from common.results import hlo

from .devices import local_devices

# JAX's name stack marks the backward pass: value_and_grad transposes the JVP
BACKWARD = "transpose(jvp("

# (regex searched in an event's name, op class): the first match wins. XLA events are
# renamed "KIND[ backward]: OP_NAME[ @ FUNCTION]" (common/results/hlo.py). Containers:
# the step marks; the host's dispatch of a program (PjitFunction) and XLA's executor
# around, between and after its instructions (ThunkExecutor, thread-pool waits and marks,
# an instruction's completion "end: NAME", a loop instruction, whose body's instructions
# are events of their own): that time is JAX's own, outside any op. An instruction's
# tasks on the pool's workers are events of its name (hlo.pool_tasks).
RULES = (
    (r"^dlc-profile-step |^\$|^(PjitFunction|ParseArguments|PythonRefManager|ThunkExecutor|"
     r"PjRtCpuExecutable|SlinkyThreadPool|ThreadpoolListener|CommonPjRt|AllocateOutputBuffers|Handle input|"
     r"Wait for (donation|usage) holds|shard_args)|^end: |^control flow", "container"),
    (r"^(DevicePut|H2D Dispatch)", "copies and layout"),     # the batch onto its device
    (r"^Transpose", "copies and layout"),     # a host array's layout changed (jaxlib 0.7.1)
    (r"^convolution backward", "conv backward"),
    (r"^convolution", "conv forward"),
    # the bias, part of the convolution's op in other frameworks (and its gradient)
    (r"^elementwise: .*/add @ conv2d$", "conv forward"),
    (r"^reduce backward: .* @ conv2d$", "conv backward"),
    # attention: jax.nn.dot_product_attention (the ViT's; Keras's dot_product_attention
    # on JAX too) runs under vmap, its einsums named by their specs (BTNH,BSNH->BNTS the
    # scores, BNTS,BSNH->BTNH the weighted sum of the values), its softmax vmap(); no
    # other op of these models runs under vmap. Its layout changes stay copies
    (r"^(?!data movement).*\bvmap\((|BTNH,BSNH->BNTS|BNTS,BSNH->BTNH)\)", "attention"),
    (r"^dot backward", "dense backward"),
    (r"^dot", "dense forward"),
    # LeNet's average pooling; ResNet-18's global average pool, its one forward reduce.
    # Not every reduce-window ("pooling: ..."): XLA:CPU rewrites long reductions (a
    # BatchNorm's statistics, a gradient's sum) into reduce-windows, which their op's
    # name places below
    (r"@ avg_pool2$|^reduce: .* @ ResNet18\.apply_units$", "pooling"),
    (r"^collective|^allreduce$", "communication"),
    (r"^data movement", "copies and layout"),
    # jax.nn.relu is jit(relu) forward; its gradient (JVP rule, not named) is a compare
    # and a select_n, the only ones in these models' backward passes
    (r"jit\(relu\)|^elementwise backward: .*/(select_n|gt)( @ |$)", "activation"),
    (r"@ batch_norm$", "batchnorm"),
    (r"@ layer_norm$", "layernorm"),
    # GELU (the exact one, jax.nn.gelu(approximate=False)): the fusion XLA builds around
    # its erfc. jax.nn's frames are left out of XLA's metadata, so its other ops carry
    # the ViT's function: its output's product (mul) and its gradient's fusion, named by
    # its last op, the sum of its two terms (add_any). The residuals' gradient sums are
    # add_any @ ViT.apply_units too, but XLA fuses them into other instructions: in the
    # ViT's compiled step (vit, batch 16) the fusions so named are GELU's alone (their
    # HLO: constants 0.5, -2/sqrt(pi), 1/sqrt(2)). Keras's gelu: frameworks/keras/profile.py
    (r"/erfc( @ |$)|^elementwise: .*/jvp\(\)/mul @ ViT\.apply_units$|"
     r"^elementwise backward: .*/transpose\(jvp\(\)\)/add_any @ ViT\.apply_units$", "gelu"),
    (r"@ loss_sum$|log_softmax", "softmax and loss"),
    (r"@ sgd_update\b|^sgd$", "optimizer update"),
    (r"^(reduce|elementwise|pooling)", "other named ops"),
)


def _options():
    opts = jax.profiler.ProfileOptions()
    opts.python_tracer_level = 0      # no Python frames: they are no ops, and cost time
    # XLA:CPU's thunk runtime before jaxlib 0.8 (0.7.1 measured) traces each instruction
    # only at host level 3; 0.10.2 traces the same events at 2 and 3
    opts.host_tracer_level = 3
    return opts


class JaxProfiler(OpProfiler):
    rules = RULES
    # XLA runs an instruction's successors inside its completion event, and a loop's
    # body inside the loop's event: the innermost event is the op
    nesting = "innermost"

    def __init__(self, folder: str):
        self.folder = folder
        self._events: list[dict] = []

    def __enter__(self):
        jax.profiler.start_trace(self.folder, profiler_options=_options())
        return self

    def __exit__(self, *exc):
        jax.profiler.stop_trace()
        # read now, while the programs that ran are alive (their HLO names the events)
        self._events = self._read()

    def step(self, i: int):
        return jax.profiler.TraceAnnotation(STEP_MARK.format(i))

    def events(self) -> list[dict]:
        return self._events

    def _read(self) -> list[dict]:
        paths = glob.glob(os.path.join(self.folder, "**", "*.xplane.pb"), recursive=True)
        data = jax.profiler.ProfileData.from_file(max(paths, key=os.path.getmtime))
        # on a GPU the step's time is the device's: its streams' kernels and copies are the
        # ops (the host's dispatch, command buffers and launches are the time outside
        # them), the host keeps only the step marks
        gpu = any(p.name.startswith("/device:GPU") for p in data.planes)
        raw = []
        for plane in data.planes:
            for line in plane.lines:
                thread = f"{plane.name} {line.name}"
                on_device = plane.name.startswith("/device:GPU") and line.name.startswith("Stream")
                for e in line.events:
                    if gpu and not on_device and not e.name.startswith(MARK_PREFIX):
                        continue
                    stats = dict(e.stats)
                    raw.append({"name": e.name, "start": e.start_ns / 1e3, "end": e.end_ns / 1e3,
                                "thread": thread, "program": stats.get("program_id"),
                                "module": stats.get("hlo_module"),
                                "op": stats.get("hlo_op"), "flow": stats.get("_p", stats.get("_c"))})
        names, by_module = _program_names(
            {e["program"] for e in raw if e["op"] is not None},
            {e["module"] for e in raw if e["op"] is not None and e["program"] is None})
        for e in raw:
            if e["op"] is not None:
                # a GPU kernel may name its module instead of its program's id
                own = names.get(e["program"]) or by_module.get(e["module"]) or {}
                e["name"] = own.get(e["op"], e["name"])
        # an instruction's work in the thread pool, after its own event has ended
        tasks = hlo.pool_tasks(raw)
        return [{k: e[k] for k in ("name", "start", "end", "thread")} for e in raw + tasks]


def _program_names(programs: set, modules: set) -> tuple[dict, dict]:
    """{program id: {instruction: its name by what it holds}} of the live executables that
    ran the given programs (an event whose program is gone keeps its raw name, unmapped),
    and the same by module name where a name is one module's alone."""
    clients = {id(d.client): d.client for kind in ("cpu", "gpu") for d in local_devices(kind)[:1]}
    out, by_name, names = {}, {}, []
    for client in clients.values():
        for executable in client.live_executables():
            for module in executable.hlo_modules():
                pid = hlo.module_id(module.as_serialized_hlo_module_proto())
                names.append(module.name)
                if (pid in programs and pid not in out) or module.name in modules:
                    ops = hlo.op_names(module.to_string(), BACKWARD)
                    out.setdefault(pid, ops)
                    by_name[module.name] = ops
    return out, {n: ops for n, ops in by_name.items() if names.count(n) == 1}


class Profile:
    def op_profiler(self, folder):
        return JaxProfiler(folder)
