"""Everything shown to a person, rendered from run records: the summary rows, the
terminal table, the Markdown report and the plots."""
from __future__ import annotations

import io
import re
from types import SimpleNamespace


from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from common.core import modes
from common.facts import registry
from common.facts.machine import cpu_line
from common.launch import networks
from common.reports import settings as settings_report, splits, utilisation
from common.results.record import model_of, nodes_of, schedule_of
from common.results.timing import NOISE_THRESHOLD, _median, repeat_figures, timing
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


def ideal_speedup(record: dict) -> int:
    """What the hardware allows: k on k GPUs, on k CPU devices that each have cores of
    their own (--cores-per-device) and on machines of their own (--nodes, not simulated);
    1 for k virtual CPU devices that share the same cores (a 1-device run already uses
    them all)."""
    own = (record.get("device_kind") == "gpu" or record.get("cores_per_device")
           or (nodes_of(record) > 1 and not networks.of(record).shares_cores))
    return all_devices(record) if own else 1


# How far apart two rows' test accuracies may end when only float rounding differs: the
# same LeNet weights (Glorot) and batches, 2 epochs on real Fashion-MNIST, each framework
# once with its full kernels and once capped to AVX2 (ONEDNN_MAX_CPU_ISA and the like) on
# a 2-core AMD EPYC with AVX-512: a row moved by up to 0.024 (MXNet scratch, 0.7515 ->
# 0.7753), every row ended within 0.7515-0.776 (docs/results/cpu-2core-default.md). Applied
# only where it was measured: LeNet, the whole Fashion-MNIST test set.
ROUNDING_ACCURACY = 0.03
PLATEAU_ACCURACY = 0.2        # ten classes: 0.1 is chance, the ln 10 plateau


# what the report asks of a mode this suite does not know (a record from elsewhere)
_UNKNOWN_MODE = SimpleNamespace(speedup_against=None, stage_figures=False, by_hand=False)


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
            + (f" {r['nodes']} nodes" if nodes_of(r) > 1 else "")
            # a run with settings of its framework's table is labelled so wherever it shows
            + (f" tuned ({'+'.join(names)})" if (names := settings_names(r)) else ""))


def row_label(r: dict) -> str:
    """A run as every figure and note names it: framework, mode label, execution, devices."""
    return (f"{r['framework']} {mode_label(r)}"
            + (f" {r['execution']}" if r.get("execution") else "") + f" x{r['devices']}")


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
    util_rows, split_rows = utilisation.rows(rows, records), splits.rows(records)
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
        *_section("## One model split over the devices", splits.table(split_rows, markdown=True),
                  splits.definitions(split_rows)),
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
        "speed-up: this row's samples/s over the same framework, mode, execution and settings' "
        "1-device row's (with a fixed global batch, the 1-device sec/epoch over this row's; under weak "
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
    across = [r for r in records if nodes_of(r) > 1]
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
            names = ", ".join(row_label(r) for r in stuck if r.get("init") == init)
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
            lines.append(f"{model}: test accuracies differ by {gap:.3f} ({row_label(lo)} "
                         f"{lo['test_accuracy']:.4f}, {row_label(hi)} {hi['test_accuracy']:.4f}): more "
                         f"than float rounding explains (up to {ROUNDING_ACCURACY} between rows from "
                         "the same weights and batches, measured), so the rows did not do the same "
                         "work (other settings, a bug, or a run still leaving the plateau).")
        else:
            lines.append(f"{model}: test accuracies agree within {gap:.3f}, what float rounding "
                         f"explains between rows from the same weights and batches (up to "
                         f"{ROUNDING_ACCURACY}, measured): no row learned better than another.")
    return lines
