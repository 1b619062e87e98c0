"""The chapters' device experiments, each written once on the primitives of
common.experiments.ops, and registered by name (`EXPERIMENTS`).

An experiment takes a `Context` (one framework's Ops, the device kinds to run on,
repeats, sizes) and returns rows (one per measured thing), checks (the proofs:
products equal NumPy's, both logging variants give the same norms, ...) and
notes. `run_experiment` turns that into the experiment's record. Every timing is
`measure`: warm-up, then repeats, the device synchronised before each clock read,
the median reported with min and max.
"""
from __future__ import annotations

import ctypes
import glob
import json
import os
import statistics
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from common.core.contract import NotApplicable
from common.core.perf import ring_bytes
from common.experiments import ops as ops_mod
from common.experiments.ops import Ops
from common.models.lenet import init_params

MIN_REPEAT = 3          # a time budget never cuts a measurement below this many repeats
KB, MB = 2**10, 2**20


@dataclass
class Context:
    ops: Ops
    framework: str
    kinds: list[str]                 # device kinds to run on: "cpu", "gpu"
    repeat: int = 5
    quick: bool = False              # tiny sizes: for the tests
    threads: int | None = None
    seed: int = 0
    rows: list = field(default_factory=list)
    checks: list = field(default_factory=list)
    notes: list = field(default_factory=list)

    @property
    def b(self):
        return self.ops.backend

    def sync(self):
        self.ops.backend.synchronize()

    def check(self, name: str, ok: bool, detail: str = "") -> bool:
        self.checks.append({"name": name, "ok": bool(ok), "detail": detail})
        return bool(ok)

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def rng(self, salt: int = 0):
        return np.random.default_rng(self.seed * 1000 + salt)

    def randn(self, shape, salt=0):
        return self.rng(salt).standard_normal(shape).astype(np.float32)


@dataclass
class Experiment:
    name: str
    title: str
    shows: str                                   # what it shows, one paragraph
    run: Callable[[Context], None]
    columns: tuple                               # (row key, header, format) for the report


EXPERIMENTS: dict[str, Experiment] = {}


def experiment(name: str, title: str, shows: str, columns: tuple):
    def register(fn):
        EXPERIMENTS[name] = Experiment(name, title, shows, fn, columns)
        return fn
    return register


def measure(fn: Callable[[], object], sync: Callable[[], None], repeat: int, warmup: int = 1,
            budget_s: float | None = None) -> dict:
    """Median, min and max seconds of fn() over `repeat` runs after `warmup` runs,
    the device synchronised before each clock read. Past `budget_s` seconds of
    timed runs, stops early (never below MIN_REPEAT)."""
    for _ in range(warmup):
        fn()
        sync()
    times = []
    for _ in range(repeat):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
        if budget_s is not None and len(times) >= MIN_REPEAT and sum(times) > budget_s:
            break
    return {"median_s": statistics.median(times), "min_s": min(times), "max_s": max(times),
            "repeats": len(times)}


def _kinds(ctx: Context) -> list[tuple[str, list[str]]]:
    """(kind, its devices) for each requested kind; a kind with no device is a row."""
    out = []
    for kind in ctx.kinds:
        devs = ctx.ops.visible_devices(kind)
        if devs:
            out.append((kind, devs))
        elif len(ctx.kinds) > 1:      # --device all: a kind the machine lacks is a note
            ctx.note(f"{ctx.framework} sees no {kind.upper()} here")
        else:                         # asked for by name: a row that says why not
            ctx.rows.append({"device": f"{kind}", "status": "not-applicable",
                             "note": f"{ctx.framework} sees no {kind.upper()} here"})
    return out


def _rel_err(got: np.ndarray, want: np.ndarray) -> float:
    want64 = want.astype(np.float64)
    return float(np.linalg.norm(got.astype(np.float64) - want64) / max(np.linalg.norm(want64), 1e-30))


def _tol(kind: str) -> float:
    return 1e-5 if kind == "cpu" else 1e-3     # GPUs may use TF32 tensor cores


def _fmt_bytes(n: int) -> str:
    for unit, size in (("GB", 2**30), ("MB", MB), ("KB", KB)):
        if n >= size:
            return f"{n / size:g} {unit}"
    return f"{n} B"


# ---------------------------------------------------------------- 1. matmul
def numpy_blas() -> str:
    """NumPy's BLAS and, for OpenBLAS, the CPU kernel it picked at run time (an
    OpenBLAS that does not recognise the CPU falls back to the slow generic
    'Prescott' kernel; OPENBLAS_CORETYPE overrides the choice)."""
    libs = glob.glob(os.path.join(os.path.dirname(np.__file__), "..", "numpy.libs", "*openblas*"))
    for lib in libs:
        try:
            dll = ctypes.CDLL(lib)
            for suffix in ("64_", ""):
                fn = getattr(dll, "openblas_get_corename" + suffix, None)
                if fn is not None:
                    fn.restype = ctypes.c_char_p
                    core = fn().decode()
                    forced = os.environ.get("OPENBLAS_CORETYPE")
                    return (f"OpenBLAS, kernel {core}"
                            + (f" (OPENBLAS_CORETYPE={forced})" if forced else " (detected)"))
        except OSError:
            continue
    return "BLAS of unknown kind"


@experiment(
    "matmul", "Matrix products, small to large",
    "Square float32 products C = A @ B from 16 to 4096 (16384 on GPUs): time per product and "
    "GFLOP/s (2n^3 flops), on every device kind the framework sees, beside NumPy's BLAS on the "
    "CPU measured in the same process at the same moment; on a GPU, where NumPy has nothing "
    "to offer, the reference is the best framework at that size in this run (of best GPU). "
    "Small products are dominated by the frontend's per-call overhead, large ones by the BLAS "
    "kernel: where a framework stops losing to NumPy, and where the GPU stops losing to the CPU.",
    (("device", "device", "s"), ("size", "n", "d"), ("median_s", "ms/product", "ms"),
     ("spread", "min-max ms", "s"), ("gflops", "GFLOP/s", ".1f"), ("vs_numpy", "of NumPy", "%"),
     ("vs_best_gpu", "of best GPU", "%")))
def matmul(ctx: Context) -> None:
    for kind, devs in _kinds(ctx):
        top = 4096 if kind == "cpu" else 16384
        sizes = [16, 64] if ctx.quick else [2**k for k in range(4, 13 if kind == "cpu" else 15)
                                           if 2**k <= top]
        # virtual CPU devices share the same cores: one CPU row set is the CPU's figure
        targets = devs[:1] if kind == "cpu" else devs
        if kind == "cpu":
            blas = numpy_blas()
            ctx.note(f"NumPy's reference: {blas}")
            if "Prescott" in blas:
                ctx.note("NumPy's OpenBLAS did not recognise this CPU and runs its generic SSE3 "
                         "'Prescott' kernel, a fraction of what the CPU does; OPENBLAS_CORETYPE="
                         "SkylakeX (or Haswell) in the environment gives its real figure")
        if kind == "cpu" and len(devs) > 1:
            ctx.note(f"{len(devs)} virtual CPU devices share the same cores; measured on {devs[0]}")
        for n in sizes:
            A, B = ctx.randn((n, n), 1), ctx.randn((n, n), 2)
            budget = 2.0
            ref = None
            if kind == "cpu":
                ref = measure(lambda: A @ B, lambda: None, ctx.repeat, budget_s=budget)
                ref.update(device="numpy", size=n, gflops=2 * n**3 / ref["median_s"] / 1e9)
            for d in targets:
                a, b = ctx.b.tensor(A, d), ctx.b.tensor(B, d)
                c = ctx.ops.matmul(a, b)
                if n <= 1024 or ctx.quick:
                    err = _rel_err(ctx.b.to_numpy(c), A @ B)
                    ctx.check(f"matmul {n} on {d} equals NumPy's", err < _tol(kind),
                              f"relative error {err:.2e}")
                m = measure(lambda: ctx.ops.matmul(a, b), ctx.sync, ctx.repeat, budget_s=budget)
                m.update(device=d, size=n, gflops=2 * n**3 / m["median_s"] / 1e9)
                if ref:
                    m["vs_numpy"] = m["gflops"] / ref["gflops"]
                ctx.rows.append(m)
            if ref:
                ctx.rows.append(ref)


# ---------------------------------------------------------------- 2. logging
@experiment(
    "logging", "A log read every step versus kept on the device",
    "1,000 products of 100x100 matrices, logging the Frobenius norm of each result: brought to "
    "the host every step (one synchronisation per step) or kept on the device and brought "
    "back once at the end. Both must give the same norms.",
    (("device", "device", "s"), ("variant", "variant", "s"), ("median_s", "total ms", "ms"),
     ("spread", "min-max ms", "s"), ("per_step_us", "us/step", ".1f"),
     ("vs_device_log", "x device log", ".2f")))
def logging(ctx: Context) -> None:
    steps = 50 if ctx.quick else 1000
    A = ctx.randn((100, 100), 3)
    Bs = [ctx.randn((100, 100), 10 + i) for i in range(10)]
    want = np.array([np.linalg.norm((A.astype(np.float64) @ Bs[i % 10].astype(np.float64)))
                     for i in range(steps)])
    for kind, devs in _kinds(ctx):
        d = devs[0]
        a = ctx.b.tensor(A, d)
        bs = [ctx.b.tensor(B, d) for B in Bs]
        ops = ctx.ops

        def every_step():
            return np.array([ops.item(ops.norm(ops.matmul(a, bs[i % 10]))) for i in range(steps)])

        def device_log():
            return ctx.b.to_numpy(ops.stack([ops.norm(ops.matmul(a, bs[i % 10]))
                                             for i in range(steps)]))

        host, dev = every_step(), device_log()
        ctx.check(f"both variants give the same norms on {d}",
                  np.allclose(host, dev, rtol=1e-6, atol=0),
                  f"max relative difference {np.max(np.abs(host - dev) / np.abs(dev)):.2e}")
        err = float(np.max(np.abs(dev - want) / want))
        ctx.check(f"norms on {d} equal NumPy's", err < _tol(kind) * 10, f"max relative error {err:.2e}")
        times = {}
        for variant, fn in (("host read every step", every_step), ("device log, read once", device_log)):
            m = measure(fn, ctx.sync, ctx.repeat)
            m.update(device=d, variant=variant, per_step_us=m["median_s"] / steps * 1e6)
            times[variant] = m
            ctx.rows.append(m)
        base = times["device log, read once"]["median_s"]
        for m in times.values():
            m["vs_device_log"] = m["median_s"] / base


# ---------------------------------------------------------------- 3. two devices
@experiment(
    "two-devices", "Two devices at once versus one after the other",
    "The same two large products (2048x2048), on two devices at once (each device gets one, "
    "enqueued before either is waited for) versus both on the first device in sequence. "
    "Expected speed-up: 2 on two distinct GPUs; 1 on a CPU, where the framework's virtual "
    "devices (or its one CPU device, twice) share the same cores.",
    (("devices", "devices", "s"), ("variant", "variant", "s"), ("median_s", "ms", "ms"),
     ("spread", "min-max ms", "s"), ("expected_speedup", "expected", ".1f"),
     ("speedup", "measured", ".2f")))
def two_devices(ctx: Context) -> None:
    n = 64 if ctx.quick else 2048
    As = [ctx.randn((n, n), 20 + i) for i in range(2)]
    Bs = [ctx.randn((n, n), 30 + i) for i in range(2)]
    for kind, devs in _kinds(ctx):
        pair = devs[:2] if len(devs) >= 2 else devs[:1] * 2
        distinct = pair[0] != pair[1]
        if kind == "cpu":
            ctx.note("CPU devices share the same cores (virtual devices, or one CPU device "
                     "used twice): the expected speed-up is 1"
                     if distinct else f"{ctx.framework} has one CPU device: both products run "
                     "on cpu:0 in both variants; expected speed-up 1")
        expected = 2.0 if (kind == "gpu" and distinct) else 1.0
        par = [(ctx.b.tensor(A, d), ctx.b.tensor(B, d)) for A, B, d in zip(As, Bs, pair)]
        seq = [(ctx.b.tensor(A, pair[0]), ctx.b.tensor(B, pair[0])) for A, B in zip(As, Bs)]
        ops = ctx.ops
        out = []
        for a, b in par:           # checked one device at a time
            out.append(ops.matmul(a, b))
            ctx.sync()
        for i, c in enumerate(out):
            err = _rel_err(ctx.b.to_numpy(c), As[i] @ Bs[i])
            ctx.check(f"product {i} on {pair[i]} equals NumPy's", err < _tol(kind),
                      f"relative error {err:.2e}")

        def run(pairs):
            return [ops.matmul(a, b) for a, b in pairs]   # enqueued; measure() waits for all

        def one_after_the_other():
            for p in seq:
                run([p])
                ctx.sync()

        label = f"{pair[0]} + {pair[1]}"
        # (--quick's 64x64 products are below the sizes where the known hangs occur)
        hazard = ctx.ops.concurrency_hazard(pair) if not ctx.quick else None
        if hazard:
            t_seq = measure(one_after_the_other, ctx.sync, ctx.repeat)
            t_seq.update(devices=f"{pair[0]} only", variant="one after the other")
            ctx.rows += [t_seq, {"devices": label, "variant": "at once",
                                 "status": "not-applicable", "note": hazard}]
            continue
        t_par = measure(lambda: run(par), ctx.sync, ctx.repeat)
        t_seq = measure(one_after_the_other, ctx.sync, ctx.repeat)
        t_par.update(devices=label, variant="at once", expected_speedup=expected,
                     speedup=t_seq["median_s"] / t_par["median_s"])
        t_seq.update(devices=f"{pair[0]} only", variant="one after the other")
        ctx.rows += [t_seq, t_par]


# ---------------------------------------------------------------- 4. async
@experiment(
    "async", "Asynchronous execution: the frontend racing ahead of the device",
    "Part 1: the time for the Python frontend to enqueue 50 products of 512x512 versus the "
    "time until the device has finished them; an enqueue time well below the completion time "
    "means the framework is asynchronous on that device. Part 2 (the d2l experiment): 10,000 "
    "tiny updates y = x + 1 with the device synchronised after every step versus once at the "
    "end.",
    (("device", "device", "s"), ("variant", "variant", "s"), ("median_s", "ms", "ms"),
     ("spread", "min-max ms", "s"), ("per_op_us", "us/op", ".1f"), ("ratio", "ratio", ".2f"),
     ("asynchronous", "async?", "s")))
def async_(ctx: Context) -> None:
    n_prod, size = (5, 32) if ctx.quick else (50, 512)
    n_tiny = 200 if ctx.quick else 10_000
    A, B = ctx.randn((size, size), 40), ctx.randn((size, size), 41)
    for kind, devs in _kinds(ctx):
        d = devs[0]
        a, b = ctx.b.tensor(A, d), ctx.b.tensor(B, d)
        ops = ctx.ops
        for _ in range(2):                       # warm-up
            [ops.matmul(a, b) for _ in range(n_prod)]
            ctx.sync()
        enq, done = [], []
        for _ in range(max(ctx.repeat, MIN_REPEAT)):
            ctx.sync()
            t0 = time.perf_counter()
            out = [ops.matmul(a, b) for _ in range(n_prod)]
            t1 = time.perf_counter()             # read before waiting: that is the point
            ctx.sync()
            t2 = time.perf_counter()
            enq.append(t1 - t0)
            done.append(t2 - t0)
            del out
        e, c = statistics.median(enq), statistics.median(done)
        ctx.rows.append({"device": d, "variant": f"enqueue {n_prod} products {size}x{size}",
                         "median_s": e, "min_s": min(enq), "max_s": max(enq),
                         "per_op_us": e / n_prod * 1e6, "ratio": e / c,
                         "asynchronous": "yes" if e < 0.5 * c else "no"})
        ctx.rows.append({"device": d, "variant": "until the device has finished", "median_s": c,
                         "min_s": min(done), "max_s": max(done), "per_op_us": c / n_prod * 1e6,
                         "ratio": 1.0})

        x = ctx.b.tensor(np.ones((1, 2), np.float32), d)
        y = ops.add_one(x)
        ctx.check(f"y = x + 1 on {d}", np.array_equal(ctx.b.to_numpy(y), np.full((1, 2), 2.0)),
                  str(ctx.b.to_numpy(y)))

        def each_step():
            for _ in range(n_tiny):
                ops.add_one(x)
                ctx.sync()

        def once():
            for _ in range(n_tiny):
                ops.add_one(x)
            ctx.sync()

        rows = {}
        for variant, fn in (("sync every step", each_step), ("sync once", once)):
            m = measure(fn, ctx.sync, ctx.repeat, budget_s=5.0)
            m.update(device=d, variant=f"{n_tiny:,} x (y = x + 1), {variant}",
                     per_op_us=m["median_s"] / n_tiny * 1e6, kind_of="tiny", sync=variant)
            rows[variant] = m
            ctx.rows.append(m)
        rows["sync every step"]["ratio"] = (rows["sync every step"]["median_s"]
                                            / rows["sync once"]["median_s"])
        rows["sync once"]["ratio"] = 1.0


# ---------------------------------------------------------------- 5. overlap
@experiment(
    "overlap", "Computation and copies overlapping; host<->device bandwidth",
    "Products on a GPU while each result is copied to the host, serially (each copy waits and "
    "blocks) versus overlapped (non-blocking copies into pinned memory on a second stream), and "
    "host-to-device / device-to-host copy bandwidth by size. On a CPU-only machine there is no "
    "copy to overlap: the rows say not-applicable.",
    (("device", "device", "s"), ("variant", "variant", "s"), ("bytes", "size", "bytes"),
     ("median_s", "ms", "ms"), ("spread", "min-max ms", "s"), ("gbps", "GB/s", ".2f"),
     ("speedup", "speed-up", ".2f")))
def overlap(ctx: Context) -> None:
    for kind in ctx.kinds:
        if kind == "cpu":
            ctx.rows.append({"device": "cpu", "status": "not-applicable",
                             "note": "CPU only: the arrays already live in host memory, so there "
                                     "is no host<->device copy to time or to overlap"})
            continue
        devs = ctx.ops.visible_devices(kind)
        if not devs:
            if len(ctx.kinds) > 1:
                ctx.note(f"{ctx.framework} sees no GPU here")
            else:
                ctx.rows.append({"device": kind, "status": "not-applicable",
                                 "note": f"{ctx.framework} sees no GPU here"})
            continue
        d = devs[0]
        sizes = [4 * KB, 64 * KB] if ctx.quick else [4 * KB, 64 * KB, MB, 16 * MB, 256 * MB]
        for nbytes in sizes:
            host = ctx.rng(50).standard_normal(nbytes // 4).astype(np.float32)
            x = ctx.ops.host_to_device(host, d)
            back = ctx.b.to_numpy(ctx.ops.device_to_host(x))
            ctx.check(f"{_fmt_bytes(nbytes)} host->{d}->host is exact", np.array_equal(back, host))
            for variant, fn in (("host to device", lambda: ctx.ops.host_to_device(host, d)),
                                ("device to host", lambda: ctx.ops.device_to_host(x))):
                m = measure(fn, ctx.sync, ctx.repeat, budget_s=2.0)
                m.update(device=d, variant=variant, bytes=nbytes, gbps=nbytes / m["median_s"] / 1e9)
                ctx.rows.append(m)
        n, k = (64, 4) if ctx.quick else (2048, 8)
        A, B = ctx.randn((n, n), 51), ctx.randn((n, n), 52)
        a, b = ctx.b.tensor(A, d), ctx.b.tensor(B, d)
        times = {}
        for variant, overlapped in (("serial copies", False), ("overlapped copies", True)):
            try:
                fn = ctx.ops.products_and_copies(a, b, k, overlapped)
            except NotApplicable as e:
                ctx.rows.append({"device": d, "variant": variant, "status": "not-applicable",
                                 "note": str(e)})
                continue
            got = [np.asarray(ctx.b.to_numpy(c) if not isinstance(c, np.ndarray) else c)
                   for c in fn()]
            ctx.sync()
            err = max(_rel_err(g, A @ B) for g in got)
            ctx.check(f"{variant}: {k} copied products equal NumPy's", err < _tol(kind),
                      f"relative error {err:.2e}")
            m = measure(fn, ctx.sync, ctx.repeat)
            m.update(device=d, variant=f"{k} products {n}x{n} + copies, {variant}",
                     bytes=k * n * n * 4)
            times[variant] = m
            ctx.rows.append(m)
        if len(times) == 2:
            times["overlapped copies"]["speedup"] = (times["serial copies"]["median_s"]
                                                     / times["overlapped copies"]["median_s"])


# ---------------------------------------------------------------- 6. round trip
@experiment(
    "roundtrip", "Parameters on devices: to a file and back",
    "A model's parameters written from a device to a file with the framework's own "
    "serialisation and read back onto another device (the next device of the same kind where "
    "there is one): bit for bit equal, time per MB each way. Sets: LeNet's parameters and "
    "16 MB of random float32 (with -0, inf, NaN and subnormal values).",
    (("route", "route", "s"), ("set", "parameters", "s"), ("bytes", "size", "bytes"),
     ("variant", "way", "s"), ("median_s", "ms", "ms"), ("spread", "min-max ms", "s"),
     ("ms_per_mb", "ms/MB", ".2f"), ("mbps", "MB/s", ".0f")))
def roundtrip(ctx: Context) -> None:
    big = ctx.randn((4, (MB if ctx.quick else 16 * MB) // 16), 60)
    big[0, :4] = [-0.0, np.inf, np.nan, np.float32(1e-42)]
    sets = {"LeNet": init_params(ctx.seed, "chapter"),
            ("1 MB random" if ctx.quick else "16 MB random"): list(big)}
    with tempfile.TemporaryDirectory(prefix="dl-compare-roundtrip-") as tmp:
        for kind, devs in _kinds(ctx):
            src, dst = devs[0], (devs[1] if len(devs) > 1 else devs[0])
            if src == dst:
                ctx.note(f"{ctx.framework} has one {kind.upper()} device here: read back "
                         f"onto {dst} itself")
            for set_name, host in sets.items():
                nbytes = sum(h.nbytes for h in host)
                arrays = [ctx.b.array(h, src) for h in host]
                path = os.path.join(tmp, f"{set_name.split()[0]}.params")
                ctx.ops.save(arrays, path)
                loaded = ctx.ops.load(path, dst, arrays)
                got = [ctx.b.to_numpy(x) for x in loaded]
                exact = len(got) == len(host) and all(
                    g.dtype == h.dtype and g.shape == h.shape and
                    np.array_equal(g.view(np.uint32), h.view(np.uint32)) for g, h in zip(got, host))
                where = {ctx.b.device_of(x) for x in loaded}
                ctx.check(f"{set_name} {src} -> file -> {dst} is bit-exact", exact)
                ctx.check(f"{set_name} read back onto {dst}", where == {dst}, f"on {sorted(where)}")
                for variant, fn in (("save (device -> file)", lambda: ctx.ops.save(arrays, path)),
                                    ("load (file -> device)", lambda: ctx.ops.load(path, dst, arrays))):
                    m = measure(fn, ctx.sync, ctx.repeat, budget_s=3.0)
                    m.update(route=f"{src} -> {dst}", set=set_name, bytes=nbytes, variant=variant,
                             ms_per_mb=m["median_s"] * 1e3 / (nbytes / MB),
                             mbps=nbytes / MB / m["median_s"])
                    ctx.rows.append(m)


# ---------------------------------------------------------------- 7. all-reduce
def allreduce_values(n: int, rank: int) -> np.ndarray:
    """Small integers in float32, so every sum is exact and any error shows."""
    return ((np.arange(n, dtype=np.int64) * 7 + 3 * rank + 1) % 17).astype(np.float32)


def _allreduce_sizes(ctx: Context) -> list[int]:
    return [4 * KB, 64 * KB] if ctx.quick else [4 * KB, 64 * KB, MB, 16 * MB, 256 * MB]


def _bandwidth(m: dict, nbytes: int, world: int) -> dict:
    algbw = nbytes / m["median_s"] / 1e9
    m.update(bytes=nbytes, algbw=algbw, busbw=ring_bytes(algbw, world))     # x 2(n-1)/n
    return m


def _rank_allreduce(rank: int, world: int, framework: str, kind: str, sizes: list, repeat: int,
                    threads: int, out_prefix: str) -> None:
    """One rank of a multi-process native all-reduce; writes its rows and checks."""
    ops = ops_mod.load(framework)
    ops.setup(cpu_devices=1, threads=threads)
    device = ops.rank_device(rank, world) if kind == "gpu" else "cpu:0"
    rows, checks = [], []
    for nbytes in sizes:
        n = nbytes // 4
        x = ops.backend.array(allreduce_values(n, rank), device)
        fn = ops.collective([x])
        want = sum(allreduce_values(n, r) for r in range(world))
        got = ops.backend.to_numpy(fn()[0])
        checks.append({"name": f"native {_fmt_bytes(nbytes)}: rank {rank} on {device} holds the sum",
                       "ok": bool(np.array_equal(got, want)), "detail": ""})
        m = measure(fn, ops.backend.synchronize, repeat, warmup=1, budget_s=3.0)
        rows.append(_bandwidth(m, nbytes, world))
        del x, fn
    Path(f"{out_prefix}.{rank}.json").write_text(json.dumps({"rows": rows, "checks": checks,
                                                            "device": device}))


@experiment(
    "allreduce", "All-reduce by size",
    "Summing one array per device and leaving the sum on every device, 4 KB to 256 MB over 2 "
    "devices (2 processes where the framework's collective runs one process per device): the "
    "chapter's by-hand allreduce (sum onto the first device, copy back) and the framework's "
    "native collective. algbw = bytes / time; busbw = algbw x 2(n-1)/n (NCCL's convention, "
    "comparable across device counts). Every device's result is checked to be the exact sum.",
    (("variant", "variant", "s"), ("devices", "devices", "s"), ("bytes", "size", "bytes"),
     ("median_s", "ms", "ms"), ("spread", "min-max ms", "s"), ("algbw", "algbw GB/s", ".3f"),
     ("busbw", "busbw GB/s", ".3f")))
def allreduce(ctx: Context) -> None:
    world = 2
    sizes = _allreduce_sizes(ctx)
    ops = ctx.ops
    for kind, devs in _kinds(ctx):
        devices = devs[:2] if len(devs) >= 2 else devs[:1] * 2
        if devices[0] == devices[1]:
            ctx.note(f"{ctx.framework} has one {kind.upper()} device: the by-hand all-reduce sums "
                     f"two replicas on {devices[0]} (the chapter's code on one device)")
        label = " + ".join(devices)
        # the chapter's allreduce, in place on every device
        for nbytes in sizes:
            n = nbytes // 4
            arrays = [ctx.b.array(allreduce_values(n, r), d) for r, d in enumerate(devices)]
            want = sum(allreduce_values(n, r) for r in range(world))
            ops.allreduce_by_hand(arrays)
            ok = all(np.array_equal(ctx.b.to_numpy(a), want) for a in arrays)
            ctx.check(f"by hand {_fmt_bytes(nbytes)}: every device holds the sum", ok)
            m = measure(lambda: ops.allreduce_by_hand(arrays), ctx.sync, ctx.repeat, budget_s=3.0)
            m.update(variant="by hand (chapter)", devices=label)
            ctx.rows.append(_bandwidth(m, nbytes, world))
            del arrays
        # the framework's own collective
        desc = ops.native_allreduce_description
        if ops.native_allreduce_processes > 1:
            ctx.note(f"native: {desc}; {ops.native_allreduce_processes} processes, "
                     f"{max(1, (ctx.threads or 2) // world)} thread(s) each")
            with tempfile.TemporaryDirectory(prefix="dl-compare-allreduce-") as tmp:
                prefix = os.path.join(tmp, "rank")
                threads = max(1, (ctx.threads or 2) // world)
                os.environ["OMP_NUM_THREADS"] = str(threads)   # the ranks read it at import
                try:
                    ops.spawn(_rank_allreduce, world,
                              (ctx.framework, kind, sizes, ctx.repeat, threads, prefix), threads)
                finally:
                    if ctx.threads:
                        os.environ["OMP_NUM_THREADS"] = str(ctx.threads)
                ranks = [json.loads(Path(f"{prefix}.{r}.json").read_text()) for r in range(world)]
            for r in ranks:
                ctx.checks += r["checks"]
            for m in ranks[0]["rows"]:
                m.update(variant="native", devices=" + ".join(r["device"] for r in ranks)
                         + f" ({world} processes)")
                ctx.rows.append(m)
        else:
            ctx.note(f"native: {desc}")
            for nbytes in sizes:
                n = nbytes // 4
                arrays = [ctx.b.array(allreduce_values(n, r), d) for r, d in enumerate(devices)]
                want = sum(allreduce_values(n, r) for r in range(world))
                fn = ops.collective(arrays)
                got = [ctx.b.to_numpy(x) for x in fn()]
                ok = len(got) == world and all(np.array_equal(g, want) for g in got)
                ctx.check(f"native {_fmt_bytes(nbytes)}: every device holds the sum", ok)
                m = measure(fn, ctx.sync, ctx.repeat, budget_s=3.0)
                m.update(variant="native", devices=label)
                ctx.rows.append(_bandwidth(m, nbytes, world))
                del arrays, fn


# ---------------------------------------------------------------- the record
RECORD_KEYS = ("framework", "framework_version", "experiment", "title", "status", "error",
               "device_kinds", "threads", "repeat", "quick", "rows", "checks", "notes",
               "elapsed_s", "load_avg", "env")


def new_record(framework: str, name: str, **fields) -> dict:
    record = dict.fromkeys(RECORD_KEYS)
    record.update(framework=framework, experiment=name, title=EXPERIMENTS[name].title,
                  status="failed", rows=[], checks=[], notes=[])
    record.update(fields)
    return record


def record_filename(framework: str, name: str) -> str:
    return f"{framework}-{name}.devices.json"


def run_experiment(ctx: Context, name: str) -> dict:
    """Run one experiment; failures are recorded, never raised."""
    record = new_record(ctx.framework, name, device_kinds=list(ctx.kinds), threads=ctx.threads,
                        repeat=ctx.repeat, quick=ctx.quick)
    ctx.rows, ctx.checks, ctx.notes = [], [], []
    load_before = os.getloadavg()[0]
    t0 = time.perf_counter()
    try:
        EXPERIMENTS[name].run(ctx)
        failed = [c["name"] + (f" ({c['detail']})" if c["detail"] else "")
                  for c in ctx.checks if not c["ok"]]
        measured = [r for r in ctx.rows if r.get("status", "ok") == "ok"]
        if failed:
            record.update(status="failed", error="check failed: " + "; ".join(failed))
        elif not measured and ctx.rows:
            record.update(status="not-applicable",
                          error="; ".join(dict.fromkeys(r["note"] for r in ctx.rows if r.get("note"))))
        else:
            record["status"] = "ok"
    except NotApplicable as e:
        record.update(status="not-applicable", error=str(e))
    except Exception as e:  # noqa: BLE001 - a failed experiment is data, the others go on
        record.update(status="failed", error=f"{type(e).__name__}: {e}",
                      traceback=traceback.format_exc(limit=8))
    record.update(rows=ctx.rows, checks=ctx.checks, notes=ctx.notes,
                  elapsed_s=time.perf_counter() - t0,
                  # the machine's 1-minute load average before and after: other work on
                  # the same cores shows here
                  load_avg=[load_before, os.getloadavg()[0]])
    return record
