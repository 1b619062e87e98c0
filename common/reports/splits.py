"""The report's table of the modes that split one model over the devices (sharded, fsdp,
tensor, tp): per row, the model's bytes, what each device holds of them between steps
(and of those, what it holds whole), and the bytes each device sends a step, counted by
the suite's collectives or read from the compiled program, beside the formula's
(common/core/perf.py; a calculation). Rendered from the records."""
from __future__ import annotations

from rich import box
from rich.table import Table
from rich.text import Text

from common import models
from common.core import perf
from common.results.record import model_of
from common.results.utilisation import all_devices

COLUMNS = ("framework", "model", "mode", "devices", "model MB", "held MB/dev", "whole MB/dev",
           "grads MB/dev", "sent MB/step/dev", "formula MB/step/dev", "compiled collectives MB")
# shown where some row has it (records written before grad_bytes have none)
OPTIONAL = ("grads MB/dev",)
MB = 1e6


def formula_bytes(record: dict) -> float | None:
    """What the mode's formula says each device sends a step (None: no formula for it)."""
    k, mode = all_devices(record), record["mode"]
    if mode in ("sharded", "fsdp"):
        # the suite's by-hand mode gathers once a step; FSDP2 and ZeRO-3 gather again for
        # the backward pass (JAX's fsdp: whatever XLA chose, set beside ZeRO-3's)
        return perf.sharded_bytes(record["param_bytes"], k, regather=mode == "fsdp")
    if mode in ("tensor", "tp"):
        m = models.get(model_of(record))
        activations = 4 * record["batch_size"] * m.TOKENS * m.SIZE["width"]
        return perf.tensor_parallel_bytes(activations, m.SIZE["blocks"], k)
    return None


def rows(records: list[dict]) -> list[dict]:
    """One row per successful record that holds its parameters' bytes per device."""
    out = []
    for r in records:
        if r["status"] != "ok" or not r.get("shard_bytes"):
            continue
        sent, formula = r.get("sent_bytes_per_step"), formula_bytes(r)
        collectives = r.get("collective_bytes")
        out.append({"framework": r["framework"], "model": model_of(r), "mode": r["mode"],
                    "devices": all_devices(r), "model MB": r["param_bytes"] / MB,
                    "held MB/dev": max(r["shard_bytes"]) / MB,
                    "whole MB/dev": (r["replicated_bytes"] / MB
                                     if r.get("replicated_bytes") is not None else None),
                    "grads MB/dev": max(r["grad_bytes"]) / MB if r.get("grad_bytes") else None,
                    "sent MB/step/dev": max(sent) / MB if sent else None,
                    "formula MB/step/dev": formula / MB if formula is not None else None,
                    "compiled collectives MB": (sum(collectives.values()) / MB
                                                if collectives else None)})
    return out


def table(split_rows: list[dict], markdown: bool = False) -> Table | None:
    if not split_rows:
        return None
    t = (Table(box=box.MARKDOWN) if markdown else
         Table(title="one model split over the devices", box=box.SIMPLE_HEAD,
               padding=(0, 1, 0, 0), pad_edge=False, show_edge=False))
    columns = _columns(split_rows)
    for c in columns:
        t.add_column(c, justify="left" if c in ("framework", "model", "mode") else "right")
    for row in split_rows:
        t.add_row(*(Text("-" if row[c] is None else
                         f"{row[c]:.3f}" if isinstance(row[c], float) else str(row[c]))
                    for c in columns))
    return t


def _columns(split_rows: list[dict]) -> list[str]:
    return [c for c in COLUMNS if c not in OPTIONAL or any(r[c] is not None for r in split_rows)]


def definitions(split_rows: list[dict]) -> list[str]:
    if not split_rows:
        return []
    return ["The modes that split one model over the devices. model MB: the parameters' "
            "bytes. held MB/dev: the most any device holds of them between steps (sharded, "
            "fsdp: its rows of each parameter; tensor, tp: its columns or rows of each split "
            "weight, and the rest whole), read from the devices' arrays; whole MB/dev: of "
            "those, what every device holds whole (tensor, tp). "
            + ("grads MB/dev: the most any device holds of the gradients it updates its "
               "parameters with, after the step's exchange, read from the gradient arrays "
               "(JAX, Keras on JAX: each update's gradient operand in the compiled step; XLA:CPU "
               "all-reduces fsdp's gradients whole; '-': not read in that split). "
               if "grads MB/dev" in _columns(split_rows) else "")
            + "sent MB/step/dev: what each "
            "device sends a step, counted by the suite's own collectives as they move "
            "(sharded: all-gather and reduce-scatter; tensor: the all-reduces of the "
            "activations, a ring's 2(k-1)/k of each). formula MB/step/dev, a calculation "
            "(common/core/perf.py): sharded 2(k-1)/k of the model (gathered once a step), "
            "fsdp 3(k-1)/k (ZeRO-3: gathered again for the backward pass), tensor and tp 4 x "
            "blocks x 2(k-1)/k x batch x tokens x width x 4 bytes. compiled collectives MB: "
            "the bytes the compiled step's collectives carry (JAX, Keras on JAX: read from its HLO; which "
            "collectives is XLA's choice)."]
