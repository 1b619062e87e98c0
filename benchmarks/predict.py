"""Predict data-parallel scaling from measured parts: `python -m benchmarks.predict DIR ...`.

    step(k) = compute(B / k) + max(0, allreduce(P, k) - overlap x backward(B / k))

compute(b): one device's step time at per-device batch b, fitted (a + c x b, least
squares) to the single-node 1-device rows of the compare folders given (those at
--fit-batches only, when given): run compare at two or more batch sizes (--batch-size
64, then 128, ...) for the fixed per-step cost a to show. allreduce(P, k): a ring all-reduce of the model's P parameter bytes over k
devices, (k - 1) x latency x 2 + 2 (k - 1) / k x P / bandwidth, with the link's
latency and bandwidth either fitted to the all-reduce rows of a `benchmarks.devices`
folder (--allreduce DIR: what this machine measured; those up to --link-fit-bytes
only, when given) or taken from a named link profile (--link). overlap: the share of the backward pass (2/3 of
a step) that gradient all-reduce can hide behind (1 where the framework overlaps
buckets with the backward, as DDP does; 0 for the chapter's allreduce after the
backward, the default). The table gives, per model, framework and mode, for 1..64
devices: t1 (compute), t2 (communication), the predicted step, speed-up and
efficiency against k, and the per-device batch from which t1 >= 1.2 x t2 (the
chapter's rule for communication to hide behind compute).

Validation, out of sample when --fit-batches and --link-fit-bytes hold rows back: each
term against what measured it alone (t1: the 1-device rows at the other batch sizes;
t2: the all-reduce rows above --link-fit-bytes), and the whole step against every
multi-device and multi-node row, beside what a model without t2 would predict."""
from __future__ import annotations

import argparse

import functools
import json
import multiprocessing as mp
import os
import sys
import time
from pathlib import Path

import numpy as np
from rich.console import Console

from common import models
from common.core.perf import LINKS, Compute, Link, allreduce_sec, predict, rule_batch_on_link
from common.launch import networks
from common.launch.launcher import thread_env
from common.reports import predict as page
from common.results.timing import step_sec
from common.results.utilisation import all_devices
from common.results.record import RecordError, load_records, model_of, nodes_of

from .cli import Parser, UsageError, int_list, positive

DEVICE_COUNTS = (1, 2, 4, 8, 16, 32, 64)
param_bytes = models.param_bytes


# the all-reduce a mode runs: the chapter's by hand in scratch mode, the framework's own
# collective (or KVStore) otherwise; named as benchmarks.devices names its rows
ALLREDUCE_VARIANT = {"scratch": "by hand (chapter)"}


def allreduce_rows(devices_dir: Path, framework: str, variant: str) -> list[dict]:
    """A devices folder's measured all-reduce rows (bytes, median_s) of one framework and
    variant, smallest first."""
    path = devices_dir / f"{framework}-allreduce.devices.json"
    if not path.is_file():
        return []
    record = json.loads(path.read_text())
    if record.get("status") != "ok":
        return []
    return sorted((r for r in record.get("rows", []) if r.get("variant") == variant
                   and r.get("median_s")), key=lambda r: r["bytes"])


@functools.lru_cache(maxsize=None)       # each validation row asks again
def fit_link(devices_dir: Path, framework: str, variant: str = "native",
             max_bytes: float | None = None) -> Link | None:
    """Latency and bandwidth of a ring step fitted to a devices folder's all-reduce rows
    of one framework and variant (2 devices: time = 2 x latency + bytes / bandwidth);
    only the rows up to max_bytes, when given (the rest are left to validate it)."""
    path = devices_dir / f"{framework}-allreduce.devices.json"
    rows = [r for r in allreduce_rows(devices_dir, framework, variant)
            if max_bytes is None or r["bytes"] <= max_bytes]
    if len(rows) < 2:
        return None
    n = np.array([r["bytes"] for r in rows], float)
    t = np.array([r["median_s"] for r in rows], float)
    slope, intercept = np.polyfit(n, t, 1)
    if slope <= 0:
        return None
    return Link(f"measured {framework} {variant}", 1 / slope, max(intercept, 0.0) / 2,
                f"fitted to {path} ({variant} all-reduce, 2 devices, {len(rows)} sizes"
                + (f" up to {page.size_text(max_bytes)})" if max_bytes else ")"))



def _kernel(core: int, seconds: float, rates) -> None:
    os.sched_setaffinity(0, [core])
    a, b = np.ones((256, 256), np.float32), np.ones((256, 256), np.float32)
    x = np.ones(2_000_000, np.float32)            # 8 MB: past the per-core caches
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        a @ b
        (x * 1.0001 + 0.5).sum()
        n += 1
    rates.put(n / (time.perf_counter() - t0))


def _rates(cores: list[int], seconds: float) -> list[float]:
    ctx = mp.get_context("spawn")
    rates = ctx.Queue()
    procs = [ctx.Process(target=_kernel, args=(c, seconds, rates)) for c in cores]
    for p in procs:
        p.start()
    out = [rates.get() for _ in procs]
    for p in procs:
        p.join()
    return out


def measure_contention(k: int, seconds: float = 2.0, rounds: int = 3) -> float:
    """One core's kernel rate alone over its mean rate when k pinned cores run it at once
    (median of alternating rounds); single-threaded BLAS, as each device's own thread."""
    cores = sorted(os.sched_getaffinity(0))[:k]
    os.environ.update(thread_env(1))          # the kernel processes read it at start
    ratios = []
    for _ in range(rounds):
        alone = _rates(cores[:1], seconds)[0]
        together = _rates(cores, seconds)
        ratios.append(alone / (sum(together) / k))
    return float(np.median(ratios))


def in_turn(record: dict) -> bool:
    """Whether a multi-device run's devices shared one process's threads: CPU devices of
    one process (every framework's operators there run on the process's one pool of
    k x C threads, whatever runs them: a Python loop, a graph or an engine), so their
    work takes the cores in turn; a process per device, and GPUs, compute at once. Across
    nodes, the devices of each node's one process take turns (devices counts a node's)."""
    return (record.get("device_kind") != "gpu" and record["devices"] > 1
            and (record.get("processes") or 1) == nodes_of(record))


def shares_machine(record: dict) -> bool:
    """CPU devices on one machine (its cores, or nodes simulated on it): they contend for
    its caches and memory bandwidth; GPUs and real machines do not."""
    if record.get("device_kind") == "gpu":
        return False
    return nodes_of(record) == 1 or networks.of(record).shares_cores


def _row_key(r: dict) -> tuple:
    return (model_of(r), r["framework"], r["mode"], r.get("execution"),
            r.get("cores_per_device"))


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="python -m benchmarks.predict", description=__doc__.split("\n\n")[0])
    p.add_argument("folders", nargs="+", metavar="DIR", help="compare results folders")
    p.add_argument("--link", choices=LINKS, default=None,
                   help="a named link profile: " + "; ".join(f"{n} ({l.source})" for n, l in LINKS.items()))
    p.add_argument("--allreduce", default=None, metavar="DIR",
                   help="a benchmarks.devices folder: the link fitted to each framework's "
                        "measured native all-reduce (instead of --link)")
    p.add_argument("--fit-batches", default=None, metavar="B,B,...",
                   type=int_list("--fit-batches", "batch sizes like 64,128", "needs two or more "
                                 "batch sizes of 1 or more (a + c x b has two unknowns)", least=2),
                   help="fit compute on the single-node 1-device rows at these batch sizes only; "
                        "1-device rows at other sizes then validate it (default: fit on all)")
    p.add_argument("--link-fit-bytes", type=positive, default=None, metavar="N",
                   help="fit the link on the --allreduce rows of at most N bytes only; the larger "
                        "ones then validate it (default: fit on all)")
    p.add_argument("--overlap", type=float, default=0.0,
                   help="share of the backward pass that all-reduce hides behind (0..1)")
    p.add_argument("--contention", default="1", metavar="F|measure",
                   help="how much slower each of k CPU devices computes when all k run at once "
                        "on cores of their own (shared caches and memory bandwidth) than one "
                        "alone: a factor, or 'measure' to time a NumPy kernel (a GEMM and a "
                        "streaming pass, one thread) on k pinned cores at once against one core "
                        "alone on this machine; applied to the rows whose devices share a machine")
    p.add_argument("--batch", type=positive, default=None,
                   help="global batch of the prediction (default: each row's measured batch)")
    p.add_argument("--out", default=None, help="folder for predict.md and predict.png "
                                                "(default: the first DIR)")
    return p


def _parse(argv) -> tuple[argparse.Namespace, list[dict]]:
    """The arguments and the folders' records; UsageError for bad input."""
    args = build_parser().parse_args(argv)
    if (args.link is None) == (args.allreduce is None):
        raise UsageError("give one of --link NAME or --allreduce DIR")
    if args.link_fit_bytes and not args.allreduce:
        raise UsageError("--link-fit-bytes holds back measured all-reduce rows: give --allreduce DIR")
    if not 0 <= args.overlap <= 1:
        raise UsageError(f"--overlap {args.overlap} must be between 0 and 1")
    records = []
    for folder in map(Path, args.folders):
        if not folder.is_dir():
            raise UsageError(f"{folder} is not a folder; give compare results folders")
        try:
            records += load_records(folder)
        except RecordError as e:
            raise UsageError(str(e)) from None
    if not any(fitted(r, args.fit_batches) for r in records if r["status"] == "ok" and step_sec(r)):
        raise UsageError("no successful single-node 1-device run in the folders"
                         + (f" at --fit-batches {','.join(map(str, args.fit_batches))}"
                            if args.fit_batches else "")
                         + ": the prediction starts from one device's measured step time")
    if args.contention != "measure":
        try:
            if not 1 <= float(args.contention) < 100:
                raise ValueError
        except ValueError:
            raise UsageError(f"--contention {args.contention!r} must be a factor of 1 or "
                             "more, or measure") from None
    if args.allreduce and not Path(args.allreduce).is_dir():
        raise UsageError(f"--allreduce {args.allreduce} is not a folder; give a "
                         "benchmarks.devices results folder")
    return args, records


def fitted(record: dict, fit_batches) -> bool:
    """Whether compute is fitted on this row: one device on one node (devices counts a
    node's), at one of the fit batch sizes when they are given."""
    return (record["devices"] == 1 and nodes_of(record) == 1
            and (not fit_batches or record["batch_size"] in fit_batches))


def main(argv=None) -> int:
    try:
        args, records = _parse(argv)
    except UsageError as e:
        print(f"predict: error: {e}", file=sys.stderr)
        return 2

    factors: dict[int, float] = {}
    skipped: list[str] = []

    def contention(k: int) -> float:
        if k not in factors:
            if args.contention != "measure":
                factors[k] = float(args.contention)
            elif k <= len(os.sched_getaffinity(0)):
                factors[k] = measure_contention(k)
            else:
                factors[k] = 1.0
                skipped.append(f"contention at {k} devices not measured: this machine lets us "
                               f"use {len(os.sched_getaffinity(0))} cores (taken as 1)")
        return factors[k]

    def link_for(framework: str, variant: str) -> Link | None:
        if args.link:
            return LINKS[args.link]
        return fit_link(Path(args.allreduce), framework, variant, args.link_fit_bytes)

    ok = [r for r in records if r["status"] == "ok" and step_sec(r)]
    groups: dict[tuple, Compute] = {}
    batches: dict[tuple, int] = {}
    for r in ok:
        if fitted(r, args.fit_batches):
            groups.setdefault(_row_key(r), Compute([])).points.append((r["batch_size"], step_sec(r)))
            batches[_row_key(r)] = max(batches.get(_row_key(r), 0), r["batch_size"])
    table = []
    fewest = {}           # the main table: each configuration at its fewest cores per device
    for key in groups:
        fewest[key[:4]] = min(fewest.get(key[:4], key), key, key=lambda k: k[4] or 0)
    for key in fewest.values():
        compute = groups[key]
        model, framework, mode, execution, cores = key
        variant = ALLREDUCE_VARIANT.get(mode, "native")
        link = link_for(framework, variant)
        if link is None:
            skipped.append(f"{framework}: {_no_link(args, framework, variant)}")
            continue
        batch, nbytes = args.batch or batches[key], param_bytes(model)
        base = predict(compute, nbytes, batch, 1, link, args.overlap)["step"]
        for k in DEVICE_COUNTS:
            if batch / k < 1:
                break
            pr = predict(compute, nbytes, batch, k, link, args.overlap)
            table.append({"model": model, "framework": framework, "mode": mode,
                          "execution": execution, "link": link.name, "batch": batch, **pr,
                          "speed-up": base / pr["step"], "efficiency": base / pr["step"] / k,
                          "rule batch": rule_batch_on_link(compute, nbytes, k, link) if k > 1 else None})
    checks, t1_checks = [], []
    for r in ok:
        k = all_devices(r)
        model, framework, mode, execution, cores = _row_key(r)
        compute = groups.get(_row_key(r))
        if compute is None or fitted(r, args.fit_batches):
            continue
        if k == 1:          # one device at a batch the fit did not see: t1 alone
            predicted, measured = compute(r["batch_size"]), step_sec(r)
            t1_checks.append({"model": model, "framework": framework, "mode": mode,
                              "cores": cores, "batch": r["batch_size"],
                              "fitted on": ", ".join(map(str, sorted({b for b, _ in compute.points}))),
                              "predicted": predicted, "measured": measured,
                              "error": predicted / measured - 1})
            continue
        # devices with hardware of their own (GPUs, --cores-per-device, or machines):
        # CPU devices that share the cores are not what the model describes
        if not (r.get("device_kind") == "gpu" or r.get("cores_per_device")):
            continue
        turns, n = None, r["devices"]          # n: the devices of one process (a node's)
        if in_turn(r):       # compute at the n x C cores the process had, one device at a time
            turns = groups.get((model, framework, mode, execution, cores * n if cores else None))
            if turns is None:
                skipped.append(f"{framework} {mode} x{k}: its devices share one process's {n} x "
                               f"{cores} cores; predicting it needs 1-device runs at {n * cores} "
                               f"cores (--cores-per-device {n * cores} --devices 1)")
                continue
        variant = ("native" if nodes_of(r) > 1 else ALLREDUCE_VARIANT.get(mode, "native"))
        link = link_for(framework, variant)
        if link is None:
            skipped.append(f"{framework} {mode} x{k}: {_no_link(args, framework, variant)}")
            continue
        pr = predict(compute, param_bytes(model), r["batch_size"], k, link, args.overlap, turns,
                     1.0 if turns or not shares_machine(r) else contention(k), n)
        measured = step_sec(r)
        checks.append({"model": model, "framework": framework, "mode": mode,
                       "execution": execution, "k": k, "nodes": nodes_of(r),
                       "batch": r["batch_size"], "scaling": r.get("scaling") or "fixed",
                       "devices run": "in turn" if turns else "at once",
                       "t1": pr["t1"], "t2": pr["t2"], "predicted": pr["step"],
                       "measured": measured, "error": pr["step"] / measured - 1,
                       "share": pr["t2"] / pr["step"], "error t2=0": pr["t1"] / measured - 1})
    t2_checks = (_t2_checks(args, {(c["framework"], v) for c in checks
                                   for v in {"native", ALLREDUCE_VARIANT.get(c["mode"], "native")}})
                 if args.link_fit_bytes else [])
    if not table:
        print("predict: error: nothing to predict: " + "; ".join(skipped), file=sys.stderr)
        return 2
    out = Path(args.out or args.folders[0])
    out.mkdir(parents=True, exist_ok=True)
    console = Console(width=None if sys.stdout.isatty() else 160)
    console.print(page.table(table, markdown=False))
    for k, f in sorted(factors.items()):
        console.print(f"contention at {k} devices: {f:.2f}", highlight=False)
    for rows, render in ((t1_checks, page.t1_table), (t2_checks, page.t2_table), (checks, page.checks_table)):
        if rows:
            console.print(render(rows, markdown=False))
    if t1_checks or t2_checks or checks:
        console.print(page.summary(checks, t1_checks, t2_checks), highlight=False)
    for line in skipped:
        console.print(line, highlight=False, markup=False)
    (out / "predict.md").write_text(page.markdown(table, checks, t1_checks, t2_checks, skipped,
                                                  records, args, argv, factors))
    page.plot(table, out / "predict.png")
    console.print(f"written: {out / 'predict.md'}, {out / 'predict.png'}", highlight=False)
    return 0


def _no_link(args, framework: str, variant: str) -> str:
    """Why no link could be fitted for a framework's all-reduce."""
    rows = allreduce_rows(Path(args.allreduce), framework, variant)
    if len(rows) >= 2 and args.link_fit_bytes:
        return (f"fewer than 2 of its {variant} all-reduce sizes in {args.allreduce} are of at most "
                f"--link-fit-bytes {args.link_fit_bytes} (sizes: "
                f"{', '.join(str(r['bytes']) for r in rows)})")
    return f"no measured {variant} all-reduce of 2 sizes or more in {args.allreduce}"


def _t2_checks(args, pairs) -> list[dict]:
    """The link fitted to the small all-reduces against the larger ones it did not see."""
    rows = []
    for framework, variant in sorted(pairs):
        link = fit_link(Path(args.allreduce), framework, variant, args.link_fit_bytes)
        if link is None:
            continue
        for r in allreduce_rows(Path(args.allreduce), framework, variant):
            if r["bytes"] > args.link_fit_bytes:
                pred = allreduce_sec(r["bytes"], 2, link)
                rows.append({"framework": framework, "variant": variant, "bytes": r["bytes"],
                             "predicted": pred, "measured": r["median_s"],
                             "error": pred / r["median_s"] - 1})
    return rows


if __name__ == "__main__":
    sys.exit(main())
