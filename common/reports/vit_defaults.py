"""The page of benchmarks.vit_defaults, rendered from its folder's records: oracle.json
(the float64 oracle's losses, the machine, the command's settings) and one
<framework>.json per framework (benchmarks/workers/vit_defaults.py: what each default
computes, which attention kernel runs on this CPU, the ViT's losses with the oracle's
choices and with each default that differs swapped in)."""
from __future__ import annotations

import json
from pathlib import Path

from common.facts import machine, registry
from common.models import vit

ORACLE_FILE = "oracle.json"
PAGE_FILE = "vit-defaults.md"
# A default "moves the loss" when the largest difference it makes over the steps is more
# than this many times the framework's float32 noise (its run with the oracle's choices
# against the float64 oracle); on the committed page the noise stays below 1e-5 and each
# default that differs moves the loss by more than 1e-4
NOISE_FACTOR = 10
CHOICE = "the oracle's choices"       # the run of the suite's model as it is

# What each framework's fused attention is on a GPU: from its documentation or source,
# not measured (this page's machine has no GPU)
GPU_DOCS = {
    "pytorch": "`F.scaled_dot_product_attention` (which `nn.MultiheadAttention` calls) picks per "
               "input among FlashAttention-2, memory-efficient, cuDNN attention and the math kernel "
               "(`torch.nn.attention.SDPBackend`; its torch 2.13 docstring: optimized kernels with "
               "the CUDA backend)",
    "paddle": "`F.scaled_dot_product_attention`: flash_attn on CUDA GPUs of SM 8.0-12.1 for float16 "
              "and bfloat16, else memory-efficient, else math (`paddle/nn/functional/sdpa.py`, "
              "paddlepaddle 3.3.1); `nn.MultiHeadAttention` writes attention out (matmul, softmax, "
              "matmul: `paddle/nn/layer/transformer.py`)",
    "tensorflow": "none: TensorFlow 2.21 has no attention op (XLA may fuse the ops written out)",
    "mxnet": "`nd.contrib.interleaved_matmul_selfatt_qk` and `_valatt` (MXNet 1.9, "
             "`src/operator/contrib/transformer.cu`): attention's two products as batched GEMMs on "
             "interleaved Q, K, V, the softmax apart; d2l's gluon attention does not call them",
    "jax": "`jax.nn.dot_product_attention`: `implementation=None` falls back to `xla`, on a GPU too; "
           "`\"cudnn\"` is cuDNN's flash attention, for a subset of shapes and dtypes "
           "(`jax/_src/nn/functions.py`, JAX 0.10.2)",
    "keras": "`MultiHeadAttention` (no dropout) calls `ops.dot_product_attention`, whose "
             "`flash_attention=None` takes cuDNN flash attention on JAX (Ampere or newer) and SDPA's "
             "flash backend on torch where their checks allow, typically float16 and bfloat16 "
             "inputs; none on TensorFlow (`keras/src/ops/nn.py`, `keras/src/backend/*/nn.py`, "
             "Keras 3.15.1)",
}


def load(folder: Path) -> tuple[dict, list[dict]]:
    """The oracle's record and the frameworks' records, in the registry's order."""
    folder = Path(folder)
    order = list(registry.FRAMEWORKS)
    records = [json.loads(p.read_text()) for p in folder.glob("*.json") if p.name != ORACLE_FILE]
    return (json.loads((folder / ORACLE_FILE).read_text()),
            sorted(records, key=lambda r: order.index(r["framework"])))


def gelu_text(m: dict, distances: bool = True) -> str:
    erf_closer = m["from_erf"] < m["from_tanh"]
    near, far = ("from_erf", "from_tanh") if erf_closer else ("from_tanh", "from_erf")
    name = "erf's" if erf_closer else "the tanh approximation"
    other = "tanh" if erf_closer else "erf"
    return f"{name} ({m[near]:.1e} from it, {m[far]:.1e} from the {other} one)" if distances else name


def measured_text(d: dict, distances: bool = True) -> str:
    m = d["measured"]
    if d["row"] == "GELU":
        return gelu_text(m, distances)
    if d["row"] == "LayerNorm":
        return f"epsilon {m['epsilon']:.1e}"
    return f"{m['biases']} bias tensors, initialised to {m['largest']:g}"


def is_choice(d: dict) -> bool:
    """Whether the measured default is the oracle's choice (erf's GELU, its epsilon, no
    attention bias)."""
    m = d["measured"]
    if d["row"] == "GELU":
        return m["from_erf"] < m["from_tanh"]
    if d["row"] == "LayerNorm":
        return abs(m["epsilon"] - vit.LN_EPS) < 1e-3 * vit.LN_EPS
    return m["biases"] == 0


ORACLE_CHOICE = {"GELU": "erf's", "LayerNorm": f"epsilon {vit.LN_EPS:.1e}",
                 "attention": "no biases (d2l's use_bias=False)"}


def largest(a, b) -> float:
    return max(abs(x - y) for x, y in zip(a, b))


def verdict(effect: float, noise: float) -> str:
    if effect > NOISE_FACTOR * noise:
        return f"moves the loss ({effect / noise:,.0f} x the noise)"
    return "within float32 noise"


def _label(r: dict) -> str:
    return f"{r['framework']} {r['version']}"


def defaults_table(records: list[dict]) -> list[str]:
    rows = ["| framework | the call | its default, measured | the oracle's choice |",
            "|---|---|---|---|"]
    for r in records:
        rows += [f"| {_label(r)} | `{d['call']}` | {measured_text(d)} | {ORACLE_CHOICE[d['row']]} |"
                 for d in r["defaults"]]
    return rows


def loss_table(oracle: dict, records: list[dict]) -> list[str]:
    steps = oracle["steps"]
    rows = [f"| framework | the default | oracle, float64 | the oracle's choices, float32 | "
            f"the default, float32 | the default's largest difference over {steps} steps | "
            "float32 noise: the choices' largest difference from the oracle | verdict |",
            "|---|---|---|---|---|---|---|---|"]
    ref = oracle["losses"]
    for r in records:
        choice = r["losses"][CHOICE]
        noise = largest(choice, ref)
        for d in r["defaults"]:
            if d["trained"]:
                mine = r["losses"][d["call"]]
                got, effect = f"{mine[-1]:.6f}", f"{largest(mine, choice):.1e}"
                said = verdict(largest(mine, choice), noise)
            elif is_choice(d):
                got, effect, said = "(the choices' run)", "0", "the oracle's choice"
            else:
                got, effect, said = "not trained", "-", "-"
            rows.append(f"| {_label(r)} | `{d['call']}` | {ref[-1]:.6f} | {choice[-1]:.6f} | "
                        f"{got} | {effect} | {noise:.1e} | {said} |")
    return rows


def summary_table(oracle: dict, records: list[dict]) -> list[str]:
    """The defaults that differ, one row per call (Keras's on each backend in one row):
    what docs/vit.md shows."""
    steps = oracle["steps"]
    found: dict[str, dict] = {}
    for r in records:
        choice = r["losses"][CHOICE]
        for d in r["defaults"]:
            if d["trained"]:
                row = found.setdefault(d["call"], {"d": d, "frameworks": [], "effects": [], "noise": []})
                row["frameworks"].append(r["framework"])
                row["effects"].append(largest(r["losses"][d["call"]], choice))
                row["noise"].append(largest(choice, oracle["losses"]))
    rows = [f"| default | the call | frameworks | the oracle's choice | the loss moved by "
            f"(largest over {steps} steps) | float32 noise |", "|---|---|---|---|---|---|"]
    for call, row in found.items():
        d, frameworks = row["d"], ", ".join(row["frameworks"])
        rows.append(f"| {d['row']}: {measured_text(d, distances=False)} | `{call}` | {frameworks} | "
                    f"{ORACLE_CHOICE[d['row']]} | {_span(row['effects'])} | {_span(row['noise'])} |")
    return rows


def _span(values: list[float]) -> str:
    lo, hi = f"{min(values):.1e}", f"{max(values):.1e}"
    return lo if lo == hi else f"{lo}-{hi}"


def attention_table(records: list[dict]) -> list[str]:
    rows = ["| framework | on this CPU, measured | on a GPU, from the documentation (not measured) |",
            "|---|---|---|"]
    for r in records:
        cpu = "; ".join(f"{what}: {', '.join(f'`{v}`' for v in seen) or 'none'}"
                        for what, seen in r["attention_cpu"].items())
        gpu = GPU_DOCS[r["framework"].partition("-")[0]]
        rows.append(f"| {_label(r)} | {cpu} | {gpu} |")
    return rows


def markdown(oracle: dict, records: list[dict]) -> str:
    env, steps = oracle["env"], oracle["steps"]
    libraries = ", ".join(f"{k} {v}" for k, v in env["libraries"].items())
    # a framework in an environment of its own (MXNet) runs on its own NumPy
    own = "".join(f"; {r['framework']}'s process: numpy {r['numpy']}" for r in records
                  if r["numpy"] != env["libraries"].get("numpy"))
    return "\n".join([
        "# The ViT's defaults that differ between frameworks", "",
        f"Command: `{oracle['command']}` ({oracle['threads']} threads).", "",
        f"Machine: {machine.cpu_line(env)}; GPU: {env.get('gpu_model') or 'none'}; "
        f"Python {env['python']}; {libraries}{own}.", "",
        f"The default-size ViT trained for {steps} SGD steps (batch {oracle['batch']}, lr "
        f"{oracle['lr']}, float32) in each framework's native mode (its own layers, the suite's "
        "trainer), from the suite's initial weights (`init_params(0, \"glorot\")`) and batches "
        "(`synthetic(0)`, `batch_order` epoch 0, seed 0): with the oracle's choices (the suite's "
        "model), and with each default that differs swapped in, the framework's own call without "
        "the argument that sets it. The oracle: `common.models.sgd_steps` in float64. A default that equals the "
        "oracle's choice is not trained again: the choices' run is its run. Verdict: a default "
        f"moves the loss when its largest difference is more than {NOISE_FACTOR} x the "
        "framework's float32 noise.", "",
        "## The defaults that differ", "", *summary_table(oracle, records), "",
        "## What each default is, measured", "",
        "GELU: the largest distance of the call's float32 output from erf's GELU and from the "
        "tanh approximation's (float64), on 1,201 points in [-6, 6]; LayerNorm: the epsilon read "
        "back from the output of a layer built without one; attention: the bias tensors of a "
        "layer built without a bias argument.", "",
        *defaults_table(records), "",
        f"## The loss after {steps} steps", "", *loss_table(oracle, records), "",
        "## Fused attention kernels", "", *attention_table(records), ""])


def write_page(folder: Path) -> str:
    """Render the folder's page into it (PAGE_FILE) and return it."""
    page = markdown(*load(folder))
    (Path(folder) / PAGE_FILE).write_text(page)
    return page
