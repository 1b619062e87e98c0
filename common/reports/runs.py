"""Everything shown to a person, rendered from run records: the summary rows, the
terminal table, the Markdown report and the plots."""
from __future__ import annotations

import io
import re
import statistics
from types import SimpleNamespace

import numpy as np
from pathlib import Path

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from common.core import modes
from common.facts import registry
from common.facts.machine import cpu_line
from common.facts.registry import NAMES
from common.launch import networks
from common.reports import settings as settings_report, utilisation, verdict
from common.results.record import model_of, ok_repeats, schedule_of
from common.results.utilisation import all_devices


def libraries_line(records: list[dict]) -> str:
    """Every library version the runs had, from each run's own environment: frameworks
    run in environments of their own (MXNet on NumPy 1), so a version that not every run
    had names the frameworks that ran with it ("numpy 2.4.6 (1.26.4: mxnet)"). Records of
    runs that ran (status ok) speak where there are any: the others were written by the
    command, in its environment."""
    ran = [r for r in records if r.get("env") and r.get("status") == "ok"] or \
        [r for r in records if r.get("env")]
    seen: dict[str, dict[str, list[str]]] = {}
    for r in ran:
        for lib, version in (r["env"].get("libraries") or {}).items():
            seen.setdefault(lib, {}).setdefault(version, []).append(r.get("framework") or "?")
    parts = []
    for lib, versions in seen.items():
        most = max(versions, key=lambda v: len(versions[v]))
        others = "; ".join(f"{v}: {', '.join(dict.fromkeys(fws))}"
                           for v, fws in versions.items() if v != most)
        parts.append(f"{lib} {most}" + (f" ({others})" if others else ""))
    return ", ".join(parts)


def machine_lines(records: list[dict]) -> list[str]:
    """Where the records were measured: the machine and the library versions (two lines)."""
    env = next((r["env"] for r in records if r.get("env")), {}) or {}
    pythons = sorted({r["env"].get("python") for r in records if r.get("env")} - {None})
    return [f"Machine: {cpu_line(env)}; GPU: {env.get('gpu_model') or 'none'}; "
            f"{env.get('os', '?')}, Python {', '.join(pythons) or '?'}",
            f"Libraries: {libraries_line(records)}; C++ compiler: {env.get('cxx') or 'none'}"]


def load_lines(records: list[dict]) -> list[str]:
    """The machine's 1-minute load average over the records' runs (`load_avg`: before
    and after each), and what it means for the times; [] where none was recorded."""
    loads = [x for r in records for x in (r.get("load_avg") or [])]
    if not loads:
        return []
    env = next((r["env"] for r in records if r.get("env")), {}) or {}
    cpus = env.get("cpu_count") or 0
    busy = (" (above the CPU count: other processes were competing for the cores, so the "
            "times are inflated and noisy)" if max(loads) > cpus else
            " (at most the CPU count: the machine was not oversubscribed)")
    return [f"Load on the machine during the run (1-minute load average, {cpus or '?'} "
            f"CPUs): {min(loads):.1f} to {max(loads):.1f}{busy}.", ""]


COLUMNS = ("framework", "model", "mode", "execution", "devices", "status", "test acc", "train loss",
           "sec/epoch", "spread", "compile s", "samples/s", "speed-up", "efficiency", "peak MB", "note")


SHORT = {"execution": "exec", "devices": "dev", "test acc": "test\nacc", "train loss": "train\nloss",
         "sec/epoch": "sec/\nepoch", "compile s": "comp\n-ile s", "samples/s": "img/s",
         "speed-up": "speed\n-up", "efficiency": "eff.", "peak MB": "peak\nMB"}


# statuses shortened on the terminal (the notes under the table give the reasons)
TERSE = {"not-applicable": "n/a", "not-installed": "missing"}


def _median(xs):
    return statistics.median(xs) if xs else None


def ideal_speedup(record: dict) -> int:
    """What the hardware allows: k on k GPUs, on k CPU devices that each have cores of
    their own (--cores-per-device) and on machines of their own (--nodes, not simulated);
    1 for k virtual CPU devices that share the same cores (a 1-device run already uses
    them all)."""
    own = (record.get("device_kind") == "gpu" or record.get("cores_per_device")
           or ((record.get("nodes") or 1) > 1 and not networks.of(record).shares_cores))
    return all_devices(record) if own else 1


# A row whose repeats spread by more than this, (max - min) / median of their
# sec/epoch, is marked noisy: runs of one configuration on a quiet machine agree to
# a few per cent; on these shared machines they move by 10-40 %.
NOISE_THRESHOLD = 0.10
# How far apart two rows' test accuracies may end when only float rounding differs: the
# same LeNet weights (Glorot) and batches, 2 epochs on real Fashion-MNIST, each framework
# once with its full kernels and once capped to AVX2 (ONEDNN_MAX_CPU_ISA and the like) on
# a 2-core AMD EPYC with AVX-512: a row moved by up to 0.024 (MXNet scratch, 0.7515 ->
# 0.7753), every row ended within 0.7515-0.776 (docs/results/cpu-2core-default.md). Applied
# only where it was measured: LeNet, the whole Fashion-MNIST test set.
ROUNDING_ACCURACY = 0.03
PLATEAU_ACCURACY = 0.2        # ten classes: 0.1 is chance, the ln 10 plateau


def repeat_figures(record: dict) -> list[dict]:
    """The successful repeats of a record (benchmarks.compare --repeat) that timed
    an epoch."""
    return [r for r in ok_repeats(record) if r.get("sec_per_epoch")]


def timing(record: dict) -> dict:
    """sec/epoch of a configuration: the median over its repeats of each repeat's median
    epoch time; samples/s from that same figure; spread = (max - min) / median of the
    repeats' figures (None with one repeat); noisy when the spread > NOISE_THRESHOLD."""
    reps = repeat_figures(record)
    runs = [_median(r["sec_per_epoch"]) for r in reps]
    sec = _median(runs)
    steps = (reps[0].get("steps_per_epoch") or [None])[0] if reps else None
    samples = (steps * record["batch_size"] / sec if (sec and steps and record.get("batch_size"))
               else (reps[0].get("samples_per_sec") if reps else None))
    spread = (max(runs) - min(runs)) / sec if len(runs) > 1 and sec else None
    return {"sec": sec, "samples": samples, "spread": spread, "runs": runs,
            "noisy": spread is not None and spread > NOISE_THRESHOLD}


# what the report asks of a mode this suite does not know (a record from elsewhere)
_UNKNOWN_MODE = SimpleNamespace(speedup_against=None, stage_figures=False, by_hand=False)


def step_sec(record: dict) -> float | None:
    """A record's time per training step: its sec/epoch over its first epoch's steps."""
    sec = timing(record)["sec"]
    steps = (record.get("steps_per_epoch") or [None])[0]
    return sec / steps if sec and steps else None


def mode_of(r: dict):
    """The mode object of a record: the report asks it, never tests a mode's name."""
    return modes.MODES.get(r["mode"], _UNKNOWN_MODE)


def settings_names(r: dict) -> list[str]:
    """The settings a run applied: a record's list, or the +-joined string of an export
    or history row (comma-joined in history lines appended before)."""
    named = r.get("settings") or []
    return [n for n in re.split("[+,]", named) if n] if isinstance(named, str) else list(named)


def mode_label(r: dict) -> str:
    """A run's mode as a reader tells its rows apart (a record, or a report row of one):
    with synchronised BatchNorm, the pipeline's schedule in model mode (gpipe or 1f1b,
    named in every such row) and the nodes of a run across machines."""
    schedule = schedule_of(r)
    return (r["mode"] + (" sync-bn" if r.get("sync_bn") else "")
            + (f" {schedule}" if schedule else "")
            + (f" {r['nodes']} nodes" if (r.get("nodes") or 1) > 1 else "")
            # a run with settings of its framework's table is labelled so wherever it shows
            + (f" tuned ({'+'.join(names)})" if (names := settings_names(r)) else ""))


def summarize(records: list[dict]) -> list[dict]:
    """One row per record; speed-up and scaling efficiency against the same
    framework's and mode's 1-device run of this comparison with the same settings (a tuned
    row against the tuned 1-device row, never the defaults'), in training images per
    second: with a fixed global batch that is the 1-device sec/epoch over this row's,
    and under weak scaling (the batch grows with the devices) the throughput gained."""
    def key(r):
        return (r["framework"], model_of(r), r["mode"], r.get("execution"),
                bool(r.get("sync_bn")), schedule_of(r), tuple(settings_names(r)))
    timings = [timing(r) if r["status"] in ("ok", "failed", "interrupted") else timing({})
               for r in records]
    base = {key(r): t for r, t in zip(records, timings) if all_devices(r) == 1 and t["sec"]}
    rows = []
    for r, t in zip(records, timings):
        sec = t["sec"]
        against = mode_of(r).speedup_against
        one = (base.get(base_key(r, against)) if against else None) or base.get(key(r))
        # throughput where both rows know it; else (records without their step count)
        # the epoch times
        speedup = (None if not (sec and one) else t["samples"] / one["samples"]
                   if (t["samples"] and one["samples"]) else one["sec"] / sec)
        # the whole first line: it may be a command to copy (an install line), never cut
        note = (r.get("error") or "").splitlines()[0] if r.get("error") else ""
        planned, done = r.get("repeat_planned") or 1, len(t["runs"])
        if 0 < done < planned:
            note = f"{done} of {planned} repeats" + ("; " + note if note else "")
        if r.get("trace"):
            note = "traced: times perturbed" + ("; " + note if note else "")
        if t["noisy"]:
            note = (f"noisy: repeats spread {t['spread']:.0%} > {NOISE_THRESHOLD:.0%}"
                    + ("; " + note if note else ""))
        rows.append({
            "framework": r["framework"], "model": model_of(r),
            "mode": mode_label(r), "execution": r.get("execution"), "devices": all_devices(r),
            "status": r["status"], "test acc": r.get("test_accuracy") if r["status"] == "ok" else None,
            "train loss": r["train_loss"][-1] if r.get("train_loss") else None, "sec/epoch": sec,
            "spread": t["spread"], "noisy": t["noisy"], "runs": t["runs"],
            "compile s": _median([x["compile_sec"] for x in repeat_figures(r)
                                  if x.get("compile_sec") is not None]),
            "samples/s": t["samples"], "speed-up": speedup,
            "efficiency": speedup / ideal_speedup(r) if speedup else None,
            "device kind": r.get("device_kind"),
            "peak MB": r.get("peak_memory_mb"),
            "note": note,
            **(pipeline_figures(r, t) if mode_of(r).stage_figures else {}),
        })
    return rows


# --- model mode (the pipeline): its own table under the main one ---

PIPELINE_COLUMNS = ("framework", "model", "stages", "M", "schedule", "processes", "step s",
                    "stage s", "hand-over s", "MB/step", "bubble", "formula bubble",
                    "held (formula)", "act. MB", "vs native x1")


def base_key(r: dict, mode: str) -> tuple:
    """The 1-device row a row of a mode with `speedup_against` is timed against: the same
    framework's run in that mode, in its default execution (model mode: native x1)."""
    execution = (registry.default_execution(r["framework"], mode)
                 if r["framework"] in registry.FRAMEWORKS else None)
    return (r["framework"], model_of(r), mode, execution, bool(r.get("sync_bn")),
            schedule_of({**r, "mode": mode}), tuple(settings_names(r)))


def _per_stage(values, fmt: str = "{}") -> str | None:
    return "/".join(fmt.format(x) for x in values) if values else None


def pipeline_figures(r: dict, t: dict) -> dict:
    steps = (r.get("steps_per_epoch") or [None])[0]
    stage = r.get("stage_sec") or []
    held, formula = r.get("stage_peak_micro_batches"), r.get("stage_peak_micro_batches_predicted")
    act = _per_stage([x / 1e6 for x in r.get("stage_activation_bytes") or []], "{:.2f}")
    calculated = (r.get("activation_bytes_source") or "").startswith("calculation")
    return {"stages": r["devices"], "M": r.get("micro_batches"), "processes": r.get("processes"),
            "schedule": schedule_of(r),
            "held (formula)": f"{_per_stage(held)} ({_per_stage(formula)})" if held else None,
            "act. MB": f"{act} calc." if act and calculated else act,
            "step s": t["sec"] / steps if (t["sec"] and steps) else None,
            "stage s": " / ".join(f"{x:.3f}" for x in stage) if stage else None,
            "hand-over s": r.get("handover_sec"),
            "MB/step": (sum(r["bytes_between_stages"]) / 1e6
                        if r.get("bytes_between_stages") is not None else None),
            "bubble": r.get("bubble"), "formula bubble": r.get("bubble_gpipe")}


def pipeline_table(rows: list[dict], markdown: bool = False) -> Table | None:
    """Model-mode rows: stages, micro-batches, where the step's time goes."""
    rows = [row for row in rows if "stages" in row]
    if not rows:
        return None
    t = (Table(box=box.MARKDOWN) if markdown else
         Table(title="model mode (pipeline)", box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0),
               pad_edge=False, show_edge=False))
    columns = PIPELINE_COLUMNS if markdown else tuple(c for c in PIPELINE_COLUMNS if c != "model")
    for c in columns:
        t.add_column(c, justify="left" if c == "framework" else "right")
    fmt = {"step s": "{:.3f}", "hand-over s": "{:.4f}", "MB/step": "{:.2f}", "bubble": "{:.2f}",
           "formula bubble": "{:.2f}", "vs native x1": "{:.2f}"}
    for row in rows:
        row = {**row, "vs native x1": row["speed-up"]}
        t.add_row(*(Text("-" if row[c] is None else fmt.get(c, "{}").format(row[c])) for c in columns))
    return t


def pipeline_definitions(rows: list[dict]) -> list[str]:
    if not any("stages" in row for row in rows):
        return []
    lines = ["Model mode: the model's layers cut into stages (stage i on device i), each batch "
             "cut into M micro-batches that flow through the stages (gradients summed, one SGD "
             "step per batch) in the schedule's order: gpipe, every forward then every backward; "
             "1f1b, one forward and one backward in turn after min(k-s-1, M) warm-up forwards "
             "at stage s. step s: sec/epoch over the steps. stage s: each stage's busy "
             "seconds per step (its forwards, backwards and SGD, the device synchronised around "
             "each; median over the steps). hand-over s: seconds per step spent handing "
             "activations and gradients to the next device (in one process: the copy; with a "
             "process per stage: starting the sends). MB/step: activations forward and their "
             "gradients back across the stage boundaries per step. bubble: the measured idle "
             "share, 1 - sum(stage s) / (stages x step s); formula bubble: (k-1)/(M+k-1), what "
             "equal stages running at once would leave idle, with either schedule. held "
             "(formula): per stage, the most micro-batches whose activations (autograd tapes) "
             "it kept alive at once, watched as the steps ran, and the formula's (gpipe M, 1f1b "
             "min(k-s, M)). act. MB: those tapes' bytes at that peak, per stage, measured from "
             "what the framework's tape saves (PyTorch, Paddle: saved-tensor hooks; JAX: the "
             "vjp's residuals) or, marked calc., a calculation from the stage's input and its "
             "units' outputs (a lower bound). vs native x1: the same framework's native "
             "1-device sec/epoch over this row's (speed-up). schedule-*.png draws each stage's "
             "spans of the last step, so the bubble shows."]
    if any(row["device kind"] != "gpu" for row in rows if "stages" in row):
        lines.append("No GPU here: the stages share the same CPU cores (virtual devices, or a "
                     "process per stage), so the ideal speed-up is 1, as for data parallelism. In "
                     "one process the stages run one after another (bubble near (k-1)/k whatever "
                     "M); with a process per stage (PyTorch, Paddle) they run at once on the "
                     "shared cores.")
    return lines


def _fmt(key, value):
    if value is None:
        return "-"
    if key in ("test acc", "train loss"):
        return f"{value:.4f}"
    if key in ("sec/epoch", "speed-up", "efficiency"):
        return f"{value:.2f}"
    if key == "compile s":
        return f"{value:.1f}"
    if key == "spread":
        return f"{value:.0%}"
    if key in ("samples/s", "peak MB"):
        return f"{value:,.0f}"
    return str(value)


def table(rows: list[dict], title: str | None = None, markdown: bool = False) -> Table:
    """The summary table; on a terminal the notes go below it (see notes())."""
    # To fit 80 columns the terminal table names the model in its title, and leaves out
    # columns with nothing to show: no value in any row (spread without repeats), or
    # speed-up and efficiency when every row is one device (1.00 by definition)
    several = len({row["devices"] for row in rows}) > 1
    columns = COLUMNS if markdown else tuple(
        c for c in COLUMNS[:-1] if c != "model" and any(row[c] is not None for row in rows)
        and (several or c not in ("speed-up", "efficiency")))
    t = (Table(title=title, box=box.MARKDOWN) if markdown else
         Table(title=title, box=box.SIMPLE_HEAD, padding=0, pad_edge=False,
               show_edge=False))
    cells = [[_fmt(c, row[c]) if markdown or c != "status" else TERSE.get(row[c], row[c])
              for c in columns] for row in rows]
    for i, c in enumerate(columns):
        # short two-line headers and no padding keep the terminal table within 80 columns
        header = c if markdown else SHORT.get(c, c)
        width = max([len(line) for line in header.splitlines()] + [len(r[i]) for r in cells])
        t.add_column(header, justify="left" if c in ("framework", "mode", "execution", "status", "note")
                     else "right",
                     no_wrap=markdown or c != "note", min_width=None if c == "note" else width)
    for r, row in zip(cells, rows):
        # text from data (errors, hints) shown literally; a noisy spread stands out
        t.add_row(*(Text(c, style="bold yellow" if k == "spread" and row.get("noisy") else "")
                    for k, c in zip(columns, r)))
    return t


def notes(rows: list[dict]) -> list[str]:
    """One line per distinct note, naming the rows it belongs to."""
    by_note: dict[str, list[str]] = {}
    for row in rows:
        if row["note"]:
            by_note.setdefault(row["note"], []).append(
                f"{row['framework']} {row['mode']} {row['execution'] or ''} x{row['devices']}"
                .replace("  ", " "))
    return [f"{', '.join(names)}: {note}" for note, names in by_note.items()]


def render_markdown(t: Table) -> str:
    """A Markdown table as text: wide enough that no cell wraps (a wrapped cell breaks the
    Markdown row, and a note a user copies, such as an install command, must stay whole
    however long the paths in it are)."""
    buf = io.StringIO()
    Console(file=buf, width=100_000, color_system=None).print(t)
    return buf.getvalue().strip()


def markdown_report(rows: list[dict], records: list[dict], command: str) -> str:
    cfg = records[0] if records else {}
    util_rows = utilisation.rows(rows, records)
    model_names = ", ".join(dict.fromkeys(model_of(r) for r in records))
    if cfg.get("batch_per_device"):
        batch = (f"batch {cfg['batch_per_device']} per device (weak scaling: the global batch and "
                 f"the learning rate grow with the device count; lr {cfg['lr'] / cfg['devices']:g} "
                 "per device)")
    else:
        batch = f"batch {cfg.get('batch_size')} (fixed global batch, split over the devices), lr {cfg.get('lr')}"
    return "\n".join([
        f"# Framework comparison: {model_names}, data-parallel training", "",
        f"Command: `{command}`", "",
        *machine_lines(records), "",
        f"Dataset {cfg.get('dataset')}, {cfg.get('epochs')} epoch(s), {batch}, "
        f"seed {cfg.get('seed')}, {cfg.get('threads')} threads per run"
        + (f", test accuracy on the first {cfg['eval_samples']} test images" if cfg.get("eval_samples")
           else "") + ".", "",
        render_markdown(table(rows, markdown=True)), "",
        *[f"- {line}" for line in definitions(rows, records)], "",
        *_section("## Utilisation and memory per device", utilisation.table(util_rows, markdown=True),
                  utilisation.definitions(util_rows)),
        *_section("## Model mode (pipeline)", pipeline_table(rows, markdown=True),
                  pipeline_definitions(rows)),
        *settings_report.best_known_lines(records)])


def _section(heading: str, t: Table | None, definitions: list[str]) -> list[str]:
    """A report.md section: the heading, the table, its definitions ([] without a table)."""
    if t is None:
        return []
    return [heading, "", render_markdown(t), "", *[f"- {line}" for line in definitions], ""]


def definitions(rows: list[dict], records: list[dict]) -> list[str]:
    """What the columns mean, for under the table; says so when devices share cores."""
    repeats = max((r.get("repeat_planned") or 1 for r in records), default=1)
    lines = [
        "sec/epoch: the median epoch time of a run, timed with the device synchronised, "
        "warm-up excluded (in each record as warmup_sec)"
        + (f"; then the median over the {repeats} repeats of the configuration, each in a fresh "
           "process, interleaved across frameworks" if repeats > 1 else "")
        + ". samples/s: training images per epoch over that same sec/epoch.",
        f"spread: (max - min) / median of the repeats' sec/epoch ('-' for a single run); above "
        f"{NOISE_THRESHOLD:.0%} the row is marked noisy.",
        "execution: how the steps ran (eager: op by op; graph: TensorFlow's tf.function; "
        "compiled: torch.compile, XLA, MXNet hybridize, Paddle to_static), each record naming "
        "the framework's mechanism; without --execution, what each mode runs by default. "
        "compile s: what tracing and compiling cost, paid once: the first warm-up step's time "
        "over the last one's (not in sec/epoch).",
        "speed-up: this row's samples/s over the same framework, mode and execution's 1-device "
        "row's (with a fixed global batch, the 1-device sec/epoch over this row's; under weak "
        "scaling, --batch-per-device, the throughput gained as the batch grows with the "
        "devices). efficiency: speed-up over the ideal the hardware allows: k on k GPUs, 1 on "
        "a CPU.",
    ]
    pinned = [r for r in records if r.get("cores_per_device")]
    if pinned:
        c = pinned[0]["cores_per_device"]
        lines.append(f"--cores-per-device {c}: every device ran on {c} CPU core(s) of its own with "
                     f"{c} thread(s) (a process per device pinned to its cores, or one process "
                     f"pinned to k x {c} cores where the framework runs all devices in one; each "
                     "record's cpu_affinity lists them), so k devices had k times the cores of "
                     "one: the ideal speed-up is k, as on GPUs, and efficiency is against it.")
    ran = [r for r in rows if r["status"] == "ok"]       # a failed row ran on no device
    if any(r["devices"] > 1 and r.get("device kind") != "gpu" for r in ran) and not pinned:
        lines.append("No GPU here: the k devices of a row are virtual devices (or processes) on the "
                     "same CPU cores, which they share (a 1-device run already uses them all), so "
                     "the ideal speed-up is 1 and a speed-up below 1 is the cost of splitting the "
                     "batch, not hardware left idle.")
    elif ran and all(r.get("device kind") in ("cpu", None) for r in ran) and not pinned:
        lines.append("No GPU here: every row ran on the CPU. Virtual devices (--devices 1,2) would "
                     "share its cores, so their ideal speed-up is 1; the default on a CPU runs 1 "
                     "device for that reason.")
    across = [r for r in records if (r.get("nodes") or 1) > 1]
    if across:
        r = across[0]
        lines.append("N nodes: a run across N machines, each framework on its own engine (each "
                     "record's engine_starter: torchrun, paddle.distributed.launch, TF_CONFIG "
                     "workers, MXNet's dist_sync parameter server); devices counts those of every "
                     "node" + networks.of(r).note
                     + ". node_sec_per_epoch in a record gives each node's own epoch times.")
    targets = [r for r in records if r.get("target_accuracy")]
    if targets:
        reached = [f"{r['framework']} {mode_label(r)} x{r['devices']}: "
                   + (f"{r['sec_to_target']:.1f} s, {r['epochs_to_target']} epoch(s)"
                      if r.get("sec_to_target") is not None else "not reached")
                   for r in targets if r["status"] == "ok"]
        lines.append(f"Time to test accuracy {targets[0]['target_accuracy']:g} (training time to "
                     "the end of the first epoch that reached it, evaluation excluded): "
                     + "; ".join(reached) + ".")
    lines += accuracy_lines(records)
    lines.append("Train loss: the last epoch's mean; test acc: after the last epoch. Peak memory: "
                 "the device allocator's peak on GPUs, else the process's maximum resident set.")
    return lines


def accuracy_lines(records: list[dict]) -> list[str]:
    """Per model, whether the rows' test accuracies differ by more than rounding explains,
    and which rows never left the ln 10 plateau (a chance-level accuracy)."""
    lines = []
    ok = [r for r in records if r["status"] == "ok" and r.get("test_accuracy") is not None]
    for model in dict.fromkeys(model_of(r) for r in ok):
        rows = [r for r in ok if model_of(r) == model]
        stuck = [r for r in rows if r["test_accuracy"] <= PLATEAU_ACCURACY]
        for init in dict.fromkeys(r.get("init") for r in stuck):
            names = ", ".join(_label(r) for r in stuck if r.get("init") == init)
            lines.append(f"{model}: {names} ended at chance level (test acc <= {PLATEAU_ACCURACY})"
                         + (": still on the ln 10 plateau, which the chapter's initialisation leaves "
                            "at a moment float rounding decides; more epochs or --init glorot leave it."
                            if init == "chapter" else ": it did not learn (too few steps, a learning "
                            "rate too high, or a bug)."))
        if len(rows) < 2:
            continue
        lo, hi = (min(rows, key=lambda r: r["test_accuracy"]), max(rows, key=lambda r: r["test_accuracy"]))
        gap = hi["test_accuracy"] - lo["test_accuracy"]
        measured = (model == "lenet" and all(r.get("dataset") == "fashion-mnist"
                                             and not r.get("eval_samples") for r in rows))
        if not measured:
            lines.append(f"{model}: test accuracies span {lo['test_accuracy']:.4f}-"
                         f"{hi['test_accuracy']:.4f}; how far float rounding alone moves them was "
                         "measured for LeNet on the whole Fashion-MNIST test set only.")
        elif gap > ROUNDING_ACCURACY:
            lines.append(f"{model}: test accuracies differ by {gap:.3f} ({_label(lo)} "
                         f"{lo['test_accuracy']:.4f}, {_label(hi)} {hi['test_accuracy']:.4f}): more "
                         f"than float rounding explains (up to {ROUNDING_ACCURACY} between rows from "
                         "the same weights and batches, measured), so the rows did not do the same "
                         "work (other settings, a bug, or a run still leaving the plateau).")
        else:
            lines.append(f"{model}: test accuracies agree within {gap:.3f}, what float rounding "
                         f"explains between rows from the same weights and batches (up to "
                         f"{ROUNDING_ACCURACY}, measured): no row learned better than another.")
    return lines


def colour(framework: str):
    """A framework's colour in every figure (fixed by its place in the registry)."""
    import matplotlib
    i = NAMES.index(framework) if framework in NAMES else len(NAMES)
    return matplotlib.colormaps["tab10"](i % 10)


def _style(r: dict) -> dict:
    return dict(color=colour(r["framework"]), lw=1.2, ls="-" if mode_of(r).by_hand else "--",
                marker="o" if r["devices"] > 1 else ".")


def _label(r: dict) -> str:
    return (f"{r['framework']} {mode_label(r)}"
            + (f" {r['execution']}" if r.get("execution") else "") + f" x{r['devices']}")


# A figure's row, one bar's label or one legend entry of 7-point text with room between:
# figures grow by this much a row, so labels never touch whatever the number of runs.
ROW_INCHES = 0.2


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _figure(plt, rows: int, width: float, height: float, **grid):
    """A figure and its axes, at least tall enough for `rows` rows; constrained layout keeps
    long labels and a legend outside the axes within the figure."""
    return plt.subplots(figsize=(width, max(height, 1 + ROW_INCHES * rows)), layout="constrained",
                        **grid)


def _legend(fig, ax):
    """The runs' legend right of the plots, one entry a line: inside the axes, the default
    run's 13 entries covered the curves."""
    fig.legend(*ax.get_legend_handles_labels(), loc="outside right upper", fontsize=7)


def figures(records: list[dict]) -> dict:
    """The figures make compare draws, by file name: throughput bars, the first step losses,
    learning curves (more than one epoch) and scaling (several device counts); one colour
    per framework, runs grouped by framework."""
    plt = _pyplot()
    from matplotlib.ticker import MaxNLocator

    order = {n: i for i, n in enumerate(NAMES)}
    ok = sorted([r for r in records if r["status"] == "ok"],
                key=lambda r: (model_of(r), order.get(r["framework"], 99),
                               not mode_of(r).by_hand, bool(r.get("sync_bn")), r["devices"]))
    if not ok:
        return {}
    figs = {}
    rows = summarize(ok)
    labels = [_label(r) for r in ok]
    # horizontal bars: each run's whole label on a line of its own (under vertical bars,
    # the default run's labels ran into each other)
    fig, ax = _figure(plt, len(ok), 8, 3)
    bars = ax.barh(range(len(ok)), [row["samples/s"] or 0 for row in rows],
                   color=[colour(r["framework"]) for r in ok], edgecolor="black", linewidth=0.5)
    for bar, r in zip(bars, ok):
        if not mode_of(r).by_hand:
            bar.set_hatch("//")
    for i, row in enumerate(rows):                 # the repeats' range, when there are repeats
        if len(row["runs"]) > 1:
            images = row["samples/s"] * row["sec/epoch"]
            ax.plot([images / max(row["runs"]), images / min(row["runs"])], [i, i], color="black")
    ax.set_yticks(range(len(ok)), labels, fontsize=7)
    ax.set_ylim(len(ok) - 0.5, -0.5)               # the first run on top, as in the table
    ax.set_xlabel("training samples / s")
    # over the figure, not the axes: long labels narrow the axes, and a title over them ran out
    fig.suptitle("Throughput (longer is better)\nhatched: the framework's own (native) mode; "
                 "black line: the repeats' range", fontsize=9)
    figs["throughput.png"] = fig

    n = min(len(r["step_losses"]) for r in ok)
    if n:
        losses = np.array([r["step_losses"][:n] for r in ok])
        median = np.median(losses, axis=0)
        fig, (top, bottom) = _figure(plt, len(ok), 11, 6, nrows=2, sharex=True)
        for r, label, row in zip(ok, labels, losses):
            top.plot(row, label=label, **{**_style(r), "marker": None})
            bottom.plot(row - median, **{**_style(r), "marker": None})
        top.set_ylabel("loss (batch mean)")
        top.set_title("First steps, same weights and batches: the frameworks should agree")
        bottom.set_ylabel("minus the median of all runs")
        bottom.set_xlabel("step")
        _legend(fig, top)
        figs["step_losses.png"] = fig

    if max(len(r.get("train_loss") or []) for r in ok) > 1:
        fig, (acc, loss) = _figure(plt, len(ok), 14, 4, ncols=2)
        for r, label in zip(ok, labels):
            accuracy = r.get("test_accuracy_per_epoch") or []
            acc.plot(range(1, len(accuracy) + 1), accuracy, label=label, **_style(r))
            loss.plot(range(1, len(r["train_loss"]) + 1), r["train_loss"], **_style(r))
        acc.set_title("Test accuracy after each epoch")
        acc.set_ylim(0, 1)
        loss.set_title("Train loss, mean over each epoch")
        for a in (acc, loss):
            a.set_xlabel("epoch")
            a.xaxis.set_major_locator(MaxNLocator(integer=True))
        _legend(fig, acc)
        figs["learning_curves.png"] = fig

    counts = sorted({r["devices"] for r in ok})
    if len(counts) > 1:
        def curve(r):
            return r["framework"], model_of(r), mode_label(r), r.get("execution")
        lines: dict[tuple, list] = {}
        for r, row in zip(ok, rows):
            if row["speed-up"]:
                lines.setdefault(curve(r), []).append((r["devices"], row["speed-up"]))
        # a run on one device count only is no scaling: its line would only crowd the legend
        lines = {key: pts for key, pts in lines.items() if len(pts) > 1 or pts[0][0] > 1}
        fig, ax = _figure(plt, len(lines) + 1, 9, 4)
        for key, pts in lines.items():
            first = next(r for r in ok if curve(r) == key)
            ax.plot(*zip(*pts), label=" ".join(str(k) for k in key if k not in ("lenet", None)),
                    **_style({**first, "devices": 2}))
        own = all(ideal_speedup(r) == r["devices"] for r in ok)
        ax.plot(counts, [c if own else 1 for c in counts], color="grey", lw=3, alpha=0.5,
                label="ideal (devices with their own hardware: k)" if own
                else "ideal (CPU cores shared: 1)")
        ax.set_xticks(counts)
        ax.set_xlabel("devices")
        ax.set_ylabel("speed-up against 1 device")
        ax.set_title("Scaling")
        _legend(fig, ax)
        figs["scaling.png"] = fig
    return figs


def plots(records: list[dict], out_dir: Path) -> list[Path]:
    """figures() and the model-mode schedules, written into out_dir. Returns the files
    written."""
    plt = _pyplot()
    return ([save_figure(plt, fig, out_dir / name) for name, fig in figures(records).items()]
            + schedule_plots(records, out_dir))


def _fmt2(x) -> str:
    return "-" if x is None else f"{x:.2f}"


def step_bubble(spans: dict) -> float | None:
    """The idle share of the step the spans record: 1 - the stages' busy seconds
    (forwards, backwards, SGD) / (stages x the step's wall time)."""
    if not spans or not spans.get("wall"):
        return None
    busy = sum(x[5] - x[4] for x in spans["spans"] if x[2] != "handover")
    return 1 - busy / (len(spans["lanes"]) * spans["wall"])


def schedule_plots(records: list[dict], out_dir: Path) -> list[Path]:
    """The pipeline's schedule as measured: for each framework, model and stage count, a
    panel per model-mode record with spans (its last step), stages x time, each
    micro-batch a colour, forwards solid, backwards hatched, hand-overs thin and grey,
    SGD black; the panels share the time axis. Returns the files written."""
    plt = _pyplot()
    from matplotlib.patches import Patch

    groups: dict[tuple, list[dict]] = {}
    for r in records:
        if r.get("status") == "ok" and r.get("pipeline_spans"):
            groups.setdefault((r["framework"], model_of(r), r["devices"]), []).append(r)
    written = []
    colours = plt.get_cmap("tab10")
    for (framework, model, k), rs in groups.items():
        rs = sorted(rs, key=lambda r: (schedule_of(r), r.get("micro_batches") or 1))
        longest = max(r["pipeline_spans"]["wall"] or 0 for r in rs) * 1e3
        fig, axes = plt.subplots(len(rs), 1, figsize=(10, 0.5 + (0.45 * k + 0.6) * len(rs)),
                                 sharex=True, squeeze=False)
        for ax, r in zip(axes[:, 0], rs):
            spans = r["pipeline_spans"]
            for lane, name, cat, m, t0, t1 in spans["spans"]:
                t0, t1 = t0 * 1e3, t1 * 1e3
                if cat in ("forward", "backward"):
                    ax.barh(lane, t1 - t0, left=t0, height=0.8, color=colours(m % 10),
                            hatch="///" if cat == "backward" else None, edgecolor="black",
                            linewidth=0.3)
                    if t1 - t0 > longest / 60:
                        ax.text((t0 + t1) / 2, lane, name, ha="center", va="center", fontsize=6,
                                bbox={"facecolor": "white", "alpha": 0.7, "pad": 0.5, "linewidth": 0})
                else:
                    ax.barh(lane + 0.3 if cat == "handover" else lane, t1 - t0, left=t0,
                            height=0.2 if cat == "handover" else 0.8,
                            color="grey" if cat == "handover" else "black")
            ax.set_yticks(range(len(spans["lanes"])), spans["lanes"], fontsize=7)
            ax.set_ylim(len(spans["lanes"]) - 0.5, -0.5)       # stage 0 on top
            held = r.get("stage_peak_micro_batches")
            ax.set_title(f"{schedule_of(r)}, M = {r.get('micro_batches')}, "
                         f"{r.get('processes')} process(es): step {(spans['wall'] or 0) * 1e3:.1f} ms "
                         f"(step {spans['step']}), bubble {_fmt2(step_bubble(spans))} in this "
                         f"step ({_fmt2(r.get('bubble'))} median), formula "
                         f"{_fmt2(r.get('bubble_gpipe'))}; "
                         f"micro-batches held per stage {held}", fontsize=8)
        axes[-1, 0].set_xlabel("ms since the step's start (the device synchronised around each span)")
        axes[0, 0].legend(handles=[Patch(facecolor="white", edgecolor="black", label="forward"),
                                   Patch(facecolor="white", edgecolor="black", hatch="///",
                                         label="backward"),
                                   Patch(color="grey", label="hand-over"), Patch(color="black", label="SGD")],
                          fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1),
                          title="colour: micro-batch", title_fontsize=6)
        fig.suptitle(f"{framework} {model}, {k} stages: the last step's schedule as measured",
                     fontsize=9)
        written.append(save_figure(plt, fig, out_dir / f"schedule-{model}-{framework}-{k}stages.png"))
    return written


def save_figure(plt, fig, path: Path) -> Path:
    if fig.get_layout_engine() is None:        # a constrained figure is laid out already
        fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


# The smallest change of sec/epoch called slower or faster (common.reports.verdict): the
# same run on these shared machines drifts by 10-40 % from one time to the next, and a
# drift between two folders is not a change of the code.
DEFAULT_NOISE = 0.15


def _key(r: dict) -> tuple:
    return (r["framework"], model_of(r), r["mode"], r.get("execution"),
            bool(r.get("sync_bn")), schedule_of(r), r["devices"])


def compare_folders(before: list[dict], after: list[dict], noise: float = DEFAULT_NOISE) -> list[dict]:
    """Rows present in both, each with the verdict on its repeats' sec/epoch (timing's
    runs) before and after (comparison_row)."""
    old = {_key(r): r for r in before if r["status"] == "ok"}
    return [comparison_row(r, timing(old[_key(r)])["runs"], timing(r)["runs"], noise)
            for r in after if r["status"] == "ok" and _key(r) in old]


def comparison_row(r: dict, before: list[float], after: list[float], band: float) -> dict:
    """A row of a comparison (compare_folders; the history's gate): the repeats' sec/epoch
    before and after, their geometric means, and the verdict (common.reports.verdict)."""
    v = verdict.verdict(before, after, band)
    return {"framework": r["framework"], "model": r.get("model") or "lenet",
            "mode": mode_label(r) + (f" {r['execution']}" if r.get("execution") else ""),
            "devices": r["devices"], "before": statistics.geometric_mean(before),
            "after": statistics.geometric_mean(after), "band": band, **v,
            "says": verdict.says(v, verdict.needed(before, after, band)
                                 if v["verdict"] == verdict.TOO_FEW else None)}


def comparison_table(rows: list[dict], markdown: bool = False) -> Table:
    t = Table(title=None if markdown else "sec/epoch, after vs before",
              box=box.MARKDOWN if markdown else box.SIMPLE_HEAD)
    numbers = ("devices", "repeats", "before", "after", "ratio", "band")
    for c in ("framework", "model", "mode", *numbers, "verdict"):
        t.add_column(c, justify="right" if c in numbers else "left")
    for r in rows:
        t.add_row(*(Text(x) for x in (r["framework"], r["model"], r["mode"], str(r["devices"]),
                                      "{} / {}".format(*r["repeats"]), f"{r['before']:.2f}",
                                      f"{r['after']:.2f}", f"{r['ratio']:.2f}",
                                      f"±{r['band']:.0%}", r["says"])))
    return t


def comparison_notes(rows: list[dict], band: float) -> list[str]:
    """What the comparison table's figures and verdicts are, and which rows had too few
    repeats for one (a gate does not count them)."""
    few = [r for r in rows if r["verdict"] == verdict.TOO_FEW]
    return [f"before, after: geometric mean of the repeats' sec/epoch (each repeat's median "
            f"epoch); ratio: after / before. Verdict: Welch's t-test on the log times, one-sided "
            f"at {verdict.ALPHA:.0%}: slower or faster when the ratio is beyond the band (±{band:.0%}) "
            f"and the test says so; within noise when the test shows the change inside the "
            f"band; otherwise too few repeats (docs/report.md)."] + (
        [f"{len(few)} of {len(rows)} row(s) had too few repeats for a verdict ("
         + ", ".join(f"{r['framework']} {r['mode']} x{r['devices']}" for r in few)
         + "): --fail-on-slower does not count them; measure with benchmarks.compare --repeat N."]
        if few else [])
