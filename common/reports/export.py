"""A results folder as rows for other programs (benchmarks.report --format csv|json):
one row per run, the record's keys that hold one value and figures derived from the
lists, under stable names that docs/report.md defines one by one (a test checks that
every column is defined there)."""
from __future__ import annotations

import csv
import io
import json
import statistics

from common.launch import engines, networks
from common.reports import runs
from common.results.record import COMPARE_KEYS, RECORD_KEYS
from common.results.timing import timing

# The record's keys that hold lists or objects (their figures come in DERIVED), and the
# traceback (many lines; `error` has its first)
NOT_SCALAR = ("device_names", "cpu_affinity", "sec_per_epoch", "steps_per_epoch", "eval_sec",
              "test_accuracy_per_epoch", "train_loss", "step_losses", "param_fingerprint",
              "stages", "stage_devices", "stage_sec", "bytes_between_stages",
              "node_sec_per_epoch", "traceback", "env", "trace", "repeats",
              "peak_memory_mb_per_device", "stage_peak_micro_batches",
              "stage_peak_micro_batches_predicted", "stage_activation_bytes",
              "stage_activation_bytes_predicted", "pipeline_spans", "placement", "settings", "slurm")
RECORD_COLUMNS = tuple(k for k in (*RECORD_KEYS, *COMPARE_KEYS) if k not in NOT_SCALAR)


def _median(xs):
    xs = [x for x in xs or [] if x is not None]
    return statistics.median(xs) if xs else None


def _env(key):
    return lambda r, t, row: (r.get("env") or {}).get(key)


# name -> (its meaning, as docs/report.md gives it; how it is read from the record r,
# its timing t (common.results.timing) and its report row)
DERIVED = {
    "sec_per_epoch_median": ("the report's sec/epoch: the median over the successful repeats "
                             "of each repeat's median epoch time",
                             lambda r, t, row: t["sec"]),
    "sec_per_epoch_spread": ("(max - min) / median of the repeats' sec/epoch; empty with one repeat",
                             lambda r, t, row: t["spread"]),
    "samples_per_sec_median": ("training images per second at sec_per_epoch_median",
                               lambda r, t, row: t["samples"]),
    "repeats_ok": ("how many repeats succeeded (1 for a record without repeats that ran)",
                   lambda r, t, row: len(t["runs"])),
    "epochs_timed": ("epochs the record timed (sec_per_epoch's length)",
                     lambda r, t, row: len(r.get("sec_per_epoch") or [])),
    "steps_per_epoch_median": ("training steps in an epoch (median over the epochs)",
                               lambda r, t, row: _median(r.get("steps_per_epoch"))),
    "eval_sec_median": ("seconds of one evaluation (median over the epochs)",
                        lambda r, t, row: _median(r.get("eval_sec"))),
    "train_loss_last": ("the last epoch's mean training loss",
                        lambda r, t, row: (r.get("train_loss") or [None])[-1]),
    "speedup": ("the report's speed-up: samples/s over the same framework and mode's 1-device "
                "row in the same folder", lambda r, t, row: row["speed-up"]),
    "efficiency": ("speedup over the ideal the hardware allows (k on k GPUs, 1 on shared CPU cores)",
                   lambda r, t, row: row["efficiency"]),
    "stage_sec_max": ("model mode: the busiest stage's seconds per step",
                      lambda r, t, row: max(r["stage_sec"]) if r.get("stage_sec") else None),
    "cpu_model": ("the CPU's model name (the record's env)", _env("cpu_model")),
    "cpu_count": ("the machine's CPU count (env)", _env("cpu_count")),
    "cpu_vector_extensions": ("the CPU's vector extensions (AVX2, AVX-512, AMX, with their "
                              "flags), which pick its kernels and so its rounding (env)",
                              _env("cpu_vector_extensions")),
    "kernel_path_env": ("the kernel-path variables that were set (ATEN_CPU_CAPABILITY, "
                        "ONEDNN_MAX_CPU_ISA, ...) as NAME=VALUE, space-separated; empty: none",
                        lambda r, t, row: " ".join(f"{k}={v}" for k, v in
                                                   ((r.get("env") or {}).get("kernel_path_env")
                                                    or {}).items())),
    "gpu_model": ("the GPUs' model names, empty without any (env)", _env("gpu_model")),
    "python_version": ("the Python version of the process that ran it (env)", _env("python")),
    "numpy_version": ("the NumPy version of the process that ran it (env; each framework's "
                      "environment has its own: MXNet's is NumPy 1)",
                      lambda r, t, row: ((r.get("env") or {}).get("libraries") or {}).get("numpy")),
    "commit": ("the suite's git commit that measured the run (env; -dirty: with uncommitted "
               "changes)", _env("commit")),
    "settings": ("the settings of the framework's table (common/facts/settings.py) the run "
                 "applied, joined by + as everywhere else; empty: the defaults (an untuned row)",
                 lambda r, t, row: "+".join(r.get("settings") or [])),
    "mode_label": ("the row's mode as the report, the plots and the history gate name it: "
                   "with sync-bn, the schedule, the nodes and tuned (a+b) where they apply",
                   lambda r, t, row: runs.mode_label(r)),
    "slurm_job": ("the Slurm job and node list the nodes came from (compare --network slurm) "
                  "as JOB:NODELIST; empty: nodes given by hand",
                  lambda r, t, row: (r.get("slurm") or None) and
                  f"{r['slurm']['job_id']}:{r['slurm']['node_list']}"),
    "trace_file": ("the run's timeline (compare --trace), empty when untraced; its times are "
                   "perturbed", lambda r, t, row: (r.get("trace") or {}).get("file")),
}
COLUMNS = RECORD_COLUMNS + tuple(DERIVED)
FORMATS = ("csv", "json")


def rows(records: list[dict]) -> list[dict]:
    """One row per record, every column in COLUMNS order (None where a run has none)."""
    report = runs.summarize(records)
    out = []
    for r, row in zip(records, report):
        t = timing(r) if r["status"] in ("ok", "failed", "interrupted") else timing({})
        out.append({**{k: r.get(k) for k in RECORD_COLUMNS},
                    # read under their names before too (older records)
                    "network": r.get("network") or (networks.of(r).name if r.get("launcher")
                                                    else None),
                    "engine_starter": engines.engine_starter(r),
                    **{k: how(r, t, row) for k, (_, how) in DERIVED.items()}})
    return out


def _cell(value):
    """A value as one CSV cell: empty for none, JSON for a list (a key that a newer
    record holds as one)."""
    if value is None:
        return ""
    return json.dumps(value) if isinstance(value, (list, dict)) else value


def render(table: list[dict], fmt: str) -> str:
    """The rows as CSV (a header of COLUMNS) or as a JSON list of objects."""
    if fmt == "json":
        return json.dumps(table, indent=1) + "\n"
    buf = io.StringIO()
    writer = csv.DictWriter(buf, COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows({k: _cell(row.get(k)) for k in COLUMNS} for row in table)
    return buf.getvalue()
