"""What a framework's settings did, read in a process started as a run's worker is
(tests/test_setting_effects.py hands it benchmarks.runner.run_config's environment and
arguments: the settings' environment from the start): the settings applied as a run
applies them (their execution, common.launch.rank.apply_settings), one training step of
LeNet (the conformance checks' batch), then each setting's probe (PROBES) reads what the
library did, not the flag that asked it to:

    python -m tests.helpers.setting_effects CONFIG_JSON OUT_PATH

OUT_PATH: {setting: {"seen": bool, "evidence": str}} for every probe of the
framework's table, so a process without a setting shows its probe unseen. What the probes read
is turned on here before the framework loads and changes nothing it does: oneDNN's log
of the primitives it executes (ONEDNN_VERBOSE, on stdout, kept in a file) and XLA's dump
of the programs it compiled (--xla_dump_to)."""
from __future__ import annotations

import ctypes
import gc
import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

from common.core.plan import RunConfig  # the facts table alone: no framework yet
from common.facts import settings
from common.launch.launcher import thread_env

# oneDNN's log line of a primitive it executed, and the kinds that compute (a reorder
# only converts)
_ONEDNN_EXEC = re.compile(r"^onednn_verbose,(?:v1,)?(?:primitive,)?exec,cpu,(\w+),.*$", re.M)
_COMPUTES = ("convolution", "matmul", "inner_product")
# XLA's optimized program: a YNNPACK fusion, and an instruction computing in bfloat16
_YNN = re.compile(r"\bynn_fusion")
_BF16_OP = re.compile(r"= bf16\[[^\]]*\]\S* (convolution|dot)\(")


class Readings:
    """What the process left to read once its step ran."""

    def __init__(self, log: Path, dump: Path, allowed: set[int]):
        self.log, self.dump, self.allowed = log, dump, allowed

    def onednn(self) -> list[str]:
        sys.stdout.flush()
        ctypes.CDLL(None).fflush(None)          # the library's own buffered lines
        return [m.group(0) for m in _ONEDNN_EXEC.finditer(self.log.read_text(errors="replace"))]

    def programs(self) -> dict[str, str]:
        """XLA's programs after its optimizations, by file name."""
        return {p.name: p.read_text() for p in sorted(self.dump.glob("*after_optimizations.txt"))}


def allocator(path: str):
    """The library malloc resolves to in this process (LD_PRELOAD puts the allocator's
    first), not only one mapped."""
    def probe(r: Readings):
        class DlInfo(ctypes.Structure):
            _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                        ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]
        info, libc = DlInfo(), ctypes.CDLL(None)
        libc.dladdr(ctypes.cast(libc.malloc, ctypes.c_void_p), ctypes.byref(info))
        owner = info.dli_fname.decode()
        return os.path.realpath(owner) == os.path.realpath(path), f"malloc is {owner}'s"
    return probe


def omp_bound(r: Readings):
    """OpenMP's threads each bound to a place of their own: after the step, the threads
    whose CPU mask is narrower than the process's at its start."""
    masks = {}
    for status in Path("/proc/self/task").glob("*/status"):
        line = next(l for l in status.read_text().splitlines() if l.startswith("Cpus_allowed_list"))
        masks[status.parent.name] = line.split(":")[1].strip()
    narrow = sorted({m for m in masks.values() if len(_cpus(m)) < len(r.allowed)})
    bound = sum(len(_cpus(m)) < len(r.allowed) for m in masks.values())
    return len(narrow) > 1, (f"{bound} of {len(masks)} threads bound, to CPUs "
                             f"{' and '.join(narrow) or 'none'}")


def _cpus(listed: str) -> set[int]:
    out = set()
    for part in listed.split(","):
        lo, _, hi = part.partition("-")
        out |= set(range(int(lo), int(hi or lo) + 1))
    return out


def onednn_bf16(r: Readings):
    """oneDNN executed a convolution or matrix product with bfloat16 data, or XLA's
    program computes one in bfloat16 (a step it compiled leaves oneDNN out)."""
    lines = [l for l in r.onednn() if _kind(l) in _COMPUTES and "bf16" in l]
    ops = [f"{name}: {m.group(1)}" for name, text in r.programs().items()
           for m in _BF16_OP.finditer(text)]
    if lines:
        return True, f"{len(lines)} oneDNN primitives in bfloat16, e.g. {lines[0][:160]}"
    if ops:
        return True, f"{len(ops)} bfloat16 ops in XLA's program, e.g. {ops[0]}"
    kinds = sorted({_kind(l) for l in r.onednn()})
    return False, (f"no bfloat16 convolution or product: oneDNN executed "
                   f"{', '.join(kinds) or 'nothing'}, XLA compiled {len(r.programs())} programs")


def onednn_ran(r: Readings):
    """oneDNN executed any primitive that computes."""
    lines = [l for l in r.onednn() if _kind(l) in _COMPUTES]
    return bool(lines), (f"{len(lines)} oneDNN primitives, e.g. {lines[0][:160]}" if lines
                         else "oneDNN executed no convolution or matrix product")


def _kind(line: str) -> str:
    return _ONEDNN_EXEC.match(line).group(1)


def xla_compiled(r: Readings):
    """XLA compiled a program of the step (a convolution in it)."""
    names = [n for n, text in r.programs().items() if " convolution(" in text or "conv" in text]
    return bool(names), f"XLA compiled {len(names)} programs with a convolution" + \
        (f", e.g. {names[0]}" if names else "")


def ynn_off(r: Readings):
    """XLA's compiled programs hold no YNNPACK fusion (and it compiled some)."""
    programs = r.programs()
    ynn = [n for n, text in programs.items() if _YNN.search(text)]
    return bool(programs) and not ynn, (f"{len(ynn)} of {len(programs)} XLA programs with a "
                                        "YNNPACK fusion")


def torch_compiled(r: Readings):
    """TorchDynamo captured a graph of the step and Inductor built it (compiled, or loaded
    from its cache of code it compiled)."""
    from torch._dynamo.utils import counters
    graphs = counters["stats"]["unique_graphs"]
    built = (sum(v for k, v in counters["inductor"].items() if k.startswith("fxgraph_cache"))
             + counters["aot_autograd"]["autograd_cache_hit"])
    return graphs > 0 and built > 0, f"{graphs} graphs captured, {built} built by Inductor"


def cached_op(r: Readings):
    """A HybridBlock holds the CachedOp (the symbolic graph) its calls ran."""
    from mxnet.gluon import HybridBlock
    blocks = [o for o in gc.get_objects() if isinstance(o, HybridBlock)]
    cached = [type(b).__name__ for b in blocks if getattr(b, "_cached_op", None) is not None]
    return bool(cached), f"{len(cached)} of {len(blocks)} HybridBlocks ran a CachedOp"


def static_program(r: Readings):
    """paddle.jit.to_static traced a static program that the calls ran."""
    from paddle.jit.dy2static.program_translator import StaticFunction
    fns = [o for o in gc.get_objects() if isinstance(o, StaticFunction)]
    traced = sum(f.get_traced_count() for f in fns)
    return traced > 0, f"{traced} static programs traced by {len(fns)} to_static functions"


# Each setting's probe, by its name, and per framework where one name means another thing
PROBES = {
    "compiled": torch_compiled, "xla": xla_compiled, "hybridize": cached_op,
    "to-static": static_program, "omp-affinity": omp_bound,
    "jemalloc": allocator(settings.JEMALLOC), "tcmalloc": allocator(settings.TCMALLOC),
    "bf16-autocast": onednn_bf16, "onednn-bf16": onednn_bf16, "mixed-bf16": onednn_bf16,
    "onednn": onednn_ran, "ynn-fusion-off": ynn_off,
}
# the instruments each framework's probes read, set before it loads
ONEDNN = {"pytorch", "tensorflow", "paddle", "keras-tensorflow", "keras-torch"}
XLA = {"tensorflow", "jax", "keras-tensorflow", "keras-jax"}


def instruments(framework: str, dump: Path) -> None:
    if framework in ONEDNN:
        os.environ["ONEDNN_VERBOSE"] = "1"
    if framework in XLA:
        flags = os.environ.get("XLA_FLAGS", "")
        os.environ["XLA_FLAGS"] = f"{flags} --xla_dump_to={dump}".strip()
        # compiled here, not loaded from JAX's cache of programs (no dump then)
        os.environ["JAX_ENABLE_COMPILATION_CACHE"] = "false"


def step(cfg: RunConfig) -> None:
    """The run's set-up as common.launch.run does it in process, and one step of LeNet on
    the conformance checks' batch: a compiled step's kernels then have the shapes of
    those the conformance process compiled, and its compiler may load them from the
    session's cache (what the probe of `compiled` accepts)."""
    import numpy as np

    from common.core.modes import MODES
    from common.facts import registry
    from common.launch.rank import apply_settings
    from tests.helpers.conformance import ORACLE_BATCH
    backend = registry.get(cfg.framework)
    backend.setup(cpu_devices=cfg.devices, threads=cfg.threads)
    apply_settings(backend, cfg)
    mode = MODES[cfg.mode]
    trainer = mode.trainer(backend, cfg, mode.devices(backend, cfg.devices))
    rng = np.random.default_rng(0)
    n = ORACLE_BATCH["lenet"]
    X = rng.standard_normal((n, 1, 28, 28)).astype(np.float32)
    trainer.losses([trainer.step(X, rng.integers(0, 10, n))])


def main(argv: list[str]) -> int:
    cfg = RunConfig(**json.loads(argv[0]))
    # as benchmarks.workers.run: the thread count and the settings' environment
    os.environ.update(thread_env(cfg.threads))
    os.environ.update(settings.env_of(settings.get(cfg.framework, cfg.settings)))
    allowed = os.sched_getaffinity(0)
    work = Path(tempfile.mkdtemp(prefix="setting-effects-"))
    instruments(cfg.framework, work / "xla")
    log = work / "stdout.log"
    os.dup2(os.open(log, os.O_WRONLY | os.O_CREAT), 1)   # oneDNN writes its log to stdout
    try:
        step(cfg)
        readings = Readings(log, work / "xla", allowed)
        out = {s.name: dict(zip(("seen", "evidence"), PROBES[s.name](readings)))
               for s in settings.SETTINGS[cfg.framework] if s.name in PROBES}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    Path(argv[1]).write_text(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
