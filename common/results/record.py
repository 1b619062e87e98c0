"""The run record: its schema, its file name, atomic files, reading a results folder."""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from common.core import modes
from common import models
from common.core.schedules import SCHEDULES
from common.core.plan import RunConfig
from common.facts import registry

STATUSES = ("ok", "failed", "diverged", "interrupted", "not-installed", "not-applicable")
FAILED = ("failed", "diverged")     # statuses that make compare exit 1
# Every key a run record has (a test checks that runs write these and no others).
RECORD_KEYS = (
    # what was run
    "framework", "framework_version", "model", "init", "dropout", "mode", "devices", "device_names", "device_kind",
    "processes", "native_mechanism", "execution", "execution_mechanism", "settings", "dataset", "epochs",
    "batch_size", "batch_per_device", "scaling", "lr", "sync_bn", "seed", "threads", "cores_per_device", "cpu_affinity",
    "eval_samples",
    # what it measured
    "warmup_sec", "compile_sec", "estimated_sec_per_epoch", "sec_per_epoch", "steps_per_epoch",
    "samples_per_sec", "eval_sec", "test_accuracy", "test_accuracy_per_epoch", "train_loss",
    "step_losses", "param_fingerprint", "final_loss", "peak_memory_mb", "peak_memory_source",
    "diverged_step",
    "last_finite_loss",
    "target_accuracy", "epochs_to_target", "sec_to_target",
    # FLOPs, utilisation and memory per device (common/results/utilisation.py): the model's
    # training FLOPs per sample (counted), achieved FLOP/s per device, the device's peak and
    # what it is, MFU (None, with mfu_note saying why, where no peak is known)
    "flops_per_sample", "samples_per_sec_per_device", "flops_per_sec_per_device",
    "peak_flops_per_device", "peak_flops_source", "mfu", "mfu_note",
    "peak_memory_mb_per_device", "peak_memory_per_device_source",
    # model mode (the pipeline, common/core/pipeline.py); None in the other modes but
    # micro_batches and schedule. bubble_gpipe: (k-1)/(M+k-1), both schedules' formula;
    # per stage, the most micro-batches whose activations it kept alive at once (watched) and
    # their bytes, with the formulas' figures; the last step's spans (compact)
    "micro_batches", "schedule", "stages", "stage_devices", "stage_sec", "handover_sec",
    "bytes_between_stages", "bubble", "bubble_gpipe",
    "stage_peak_micro_batches", "stage_peak_micro_batches_predicted", "stage_activation_bytes",
    "stage_activation_bytes_predicted", "activation_bytes_source", "pipeline_spans",
    # sharded mode (common/core/sharded.py): each device's bytes of the parameters kept
    # between steps, the parameters' bytes, each device's bytes sent a step
    "shard_bytes", "param_bytes", "sent_bytes_per_step",
    # tensor mode (common/core/tensor.py): the bytes every device holds whole
    "replicated_bytes",
    # sharded and tensor mode by hand, PyTorch's fsdp and tp, Paddle's tp: each device's
    # bytes of the gradients it updates its parameters with (after the step's exchange)
    "grad_bytes",
    # fsdp mode where one compiled program runs the step (JAX): the bytes its collectives
    # carry, by kind, read from the program (common/results/hlo.py: collective_bytes)
    "collective_bytes",
    # several machines (common.launch.nodes): node count, this machine's node, the network
    # the nodes ran on (common.launch.networks; records written before it named it
    # "launcher": read it with networks.of), how the framework's engine started on them
    # (records before it: "cluster_launcher"), the processes over all nodes, MXNet's
    # parameter servers, and each simulated node's sec/epoch (--network loopback)
    "nodes", "node_rank", "network", "slurm", "engine_starter", "world_size", "servers",
    "node_sec_per_epoch",
    # where the batch went, read from the steps' inputs, for the trainers whose numbers do
    # not show it (Trainer.placement: the devices and processes one step spans, each
    # device's rows and share of the step's FLOPs); None for the others
    "placement",
    # how it ended, and where; with --trace, the timeline's file and what tracing does
    # to the times (common/results/trace.py)
    "status", "error", "traceback", "env", "trace",
)
# Keys that benchmarks.compare adds to a worker's record: the figures of every
# repeat (--repeat), and how many were planned.
COMPARE_KEYS = ("repeats", "repeat_planned")
# the figures of one repeat, kept for each in a record's "repeats"
REPEAT_KEYS = ("status", "error", "sec_per_epoch", "steps_per_epoch", "samples_per_sec",
               "warmup_sec", "compile_sec", "test_accuracy", "test_accuracy_per_epoch",
               "train_loss", "peak_memory_mb", "diverged_step", "last_finite_loss", "epochs_to_target",
               "sec_to_target")


def _default_execution(framework: str, mode: str) -> str | None:
    """The execution a mode runs when none is asked for; None for a framework the
    registry does not know (a record from elsewhere)."""
    return registry.default_execution(framework, mode) if framework in registry.FRAMEWORKS else None


def new_record(cfg: RunConfig) -> dict:
    """A record with every key, filled from the config; the run fills in the rest."""
    record = dict.fromkeys(RECORD_KEYS)
    record.update(framework=cfg.framework, model=cfg.model, init=cfg.init,
                  dropout=models.get(cfg.model).DROPOUT, mode=cfg.mode,
                  devices=cfg.devices,
                  execution=cfg.execution, settings=list(cfg.settings),
                  dataset=cfg.dataset, epochs=cfg.epochs, batch_size=cfg.batch_size,
                  batch_per_device=cfg.batch_per_device,
                  scaling="weak" if cfg.batch_per_device else "fixed", lr=cfg.lr,
                  sync_bn=cfg.sync_bn, seed=cfg.seed, threads=cfg.threads,
                  cores_per_device=cfg.cores_per_device, target_accuracy=cfg.target_accuracy,
                  eval_samples=cfg.eval_samples, micro_batches=cfg.micro_batches,
                  schedule=cfg.schedule,
                  nodes=cfg.nodes, node_rank=cfg.node_rank if cfg.nodes > 1 else None,
                  network=cfg.network if cfg.nodes > 1 else None,
                  slurm=cfg.slurm,
                  status="failed",
                  sec_per_epoch=[], train_loss=[], step_losses=[], device_names=[])
    return record


def mark_not_installed(record: dict) -> dict:
    """A run's record completed as not installed here (with the install command)."""
    record.update(status="not-installed", error=registry.not_installed(record["framework"]))
    return record


def write_atomic(path: str | os.PathLike, data) -> None:
    """Write JSON so that a reader sees the old file or the new one, never half of one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".tmp", delete=False) as f:
        json.dump(data, f, indent=1)
        tmp = f.name
    os.replace(tmp, path)


def write_rank_part(folder: str | os.PathLike, kind: str, rank: int, data) -> None:
    """What a rank leaves in `folder` for the process that started the ranks to read
    (kind: what it is, e.g. its timeline or its memory)."""
    write_atomic(Path(folder) / f"{kind}-rank{rank}.json", data)


def read_rank_parts(folder: str | os.PathLike, kind: str) -> list:
    """Every rank's `kind` part that write_rank_part left in `folder`, in rank order."""
    paths = sorted(Path(folder).glob(f"{kind}-rank*.json"),
                   key=lambda p: int(p.stem.rsplit("-rank", 1)[1]))
    return [json.loads(p.read_text()) for p in paths]


def schedule_of(record: dict) -> str | None:
    """The pipeline schedule a run (a record, or a report row of one) followed; None in a
    mode that has none, whatever its `schedule` field holds (RunConfig's default there). A
    model-mode record from before the schedule was a choice ran GPipe, the default."""
    mode = modes.MODES.get(record["mode"])
    if mode is None or "schedule" not in mode.options:
        return None
    return record.get("schedule") or RunConfig.schedule


def record_filename(record: dict) -> str:
    model = "" if model_of(record) == "lenet" else f"{record['model']}-"
    sync = "-syncbn" if record.get("sync_bn") else ""
    # an execution other than the mode's default is named (a default run's file keeps
    # its name, whether or not --execution named it)
    ran, default = record.get("execution"), _default_execution(record["framework"], record["mode"])
    execution = f"-{ran}" if ran and default and ran != default else ""
    # a schedule other than the default is named, so that --schedule gpipe,1f1b keeps both
    # runs (a GPipe run's file keeps the name it had before the schedule was a choice)
    ran = schedule_of(record)
    schedule = f"-{ran}" if ran and ran != RunConfig.schedule else ""
    nodes = f"{record['nodes']}nodes-" if nodes_of(record) > 1 else ""
    # a tuned run (compare --settings) never takes a default run's file
    tuned = "-tuned-" + "+".join(record["settings"]) if record.get("settings") else ""
    return (f"{model}{record['framework']}-{record['mode']}{sync}{execution}{schedule}{tuned}-"
            f"{nodes}{record['devices']}dev.json")


def ok_repeats(record: dict) -> list[dict]:
    """The figures of a record's successful repeats (a record without "repeats"
    counts as one repeat)."""
    repeats = record.get("repeats") or [{k: record.get(k) for k in REPEAT_KEYS}]
    return [r for r in repeats if r.get("status") == "ok"]


class RecordError(ValueError):
    """A file in a results folder that is not a readable run record; names the file."""


# records written before the suite had a second model name none: they are LeNet's
MODEL_BEFORE_MODELS = "lenet"


def model_of(record: dict) -> str:
    """A record's model (or a report row's, a history line's), read the one way: a record
    from before models were named is LeNet's."""
    return record.get("model") or MODEL_BEFORE_MODELS


def nodes_of(record: dict) -> int:
    """The machines a run spanned (a record, a report row, a settings group), read the one
    way: one where it says none (a record from before runs spanned machines)."""
    return record.get("nodes") or 1


def read_record(path: str | os.PathLike) -> dict:
    path = Path(path)
    try:
        record = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise RecordError(f"{path} is not a readable run record ({type(e).__name__}: {e}); "
                          "delete it to run that configuration again") from None
    missing = ([k for k in ("framework", "mode", "devices", "status") if k not in record]
               if isinstance(record, dict) else ["keys"])
    if missing:
        raise RecordError(f"{path} is not a run record (no {', '.join(missing)}); "
                          "delete it to run that configuration again")
    return record


def load_records(directory: str | os.PathLike) -> list[dict]:
    """Every record in a results folder, in the order compare runs them (grouped by
    model, then framework). A corrupt record raises RecordError naming the file."""
    records = [read_record(p) for p in Path(directory).glob("*dev.json")]
    order = {n: i for i, n in enumerate(registry.NAMES)}
    executions = list(registry.EXECUTIONS)
    return sorted(records, key=lambda r: (model_of(r),
                                          order.get(r["framework"], len(order)),
                                          modes.NAMES.index(r["mode"]) if r["mode"] in modes.NAMES else 99,
                                          bool(r.get("sync_bn")),
                                          executions.index(r["execution"])
                                          if r.get("execution") in executions else -1,
                                          list(SCHEDULES).index(schedule_of(r))
                                          if schedule_of(r) in SCHEDULES else -1,
                                          r["devices"]))
