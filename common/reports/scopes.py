"""The device-scopes report (benchmarks.device_scopes): one row per framework, one
placement against the other, rendered from the records."""
from __future__ import annotations

from common.experiments.scopes import D, H, TASK
from common.facts import registry
from common.reports.formats import ms
from common.reports.runs import load_lines, machine_lines


def _ms(seconds) -> str:
    return ms(seconds, ",.0f")


def _time(r: dict | None) -> str:
    if not r or r["status"] != "ok":
        return "-"
    return f"{_ms(r['step_median_s'])} ({_ms(r['step_min_s'])}-{_ms(r['step_max_s'])})"


def _mb(n) -> str:
    return "-" if n is None else (f"{n / 2**20:.2f} MB" if n >= 2**16 else f"{n:,} B")


def _devices(r: dict) -> str:
    d = r.get("devices")
    return "-" if not d else f"{d['branch_a']}, {d['branch_b']}, {d['merge']}"


def summary_rows(records: list[dict]) -> list[dict]:
    """One row per framework: its two placements side by side."""
    by_fw: dict[str, dict] = {}
    for r in records:
        by_fw.setdefault(r["framework"], {})[r["placement"]] = r
    order = {n: i for i, n in enumerate(registry.NAMES)}
    rows = []
    for fw in sorted(by_fw, key=lambda f: order.get(f, 99)):
        one, two = by_fw[fw].get("one-device"), by_fw[fw].get("two-branch")
        both_ok = one and two and one["status"] == two["status"] == "ok"
        main = two if two and two["status"] == "ok" else (one if one and one["status"] == "ok" else None)
        statuses = [f"{r['placement']}: {r['status']}" + (f" ({r['error']})" if r.get("error") else "")
                    for r in (one, two) if r and r["status"] != "ok"]
        agree = (two or {}).get("vs_one_device")
        rows.append({
            "framework": fw,
            "placement": _devices(two) if two and two.get("devices") else "-",
            "one": _time(one), "two": _time(two),
            "ratio": f"{two['step_median_s'] / one['step_median_s']:.2f}" if both_ok else "-",
            "bytes": _mb(two["bytes_moved_per_step"]) if two and two["status"] == "ok" else "-",
            "loss": (f"{main['loss_first']:.4f} -> {main['loss_last']:.4f}" if main else "-"),
            "agree": (f"{agree['max_loss_diff']:.1e} / {agree['max_param_diff']:.1e}"
                      if agree else "-"),
            "status": "; ".join(statuses) or ("ok (one device: see notes)"
                                              if two and two.get("distinct_devices") == 1 else "ok"),
        })
    return rows


COLUMNS = (("framework", "framework"), ("placement", "two-branch placement (a, b, merge)"),
           ("one", "ms/step, 1 device"), ("two", "ms/step, two branches"),
           ("ratio", "two/one"), ("bytes", "bytes moved/step"), ("loss", "loss, step 1 -> N"),
           ("agree", "vs 1 device (loss / params)"), ("status", "status"))


def markdown_report(records: list[dict], command: str) -> str:
    rows = summary_rows(records)
    cfg = next((r for r in records if r.get("steps")), records[0])
    lines = ["# Device scopes: one shared LSTM, two branches on two devices", "",
             f"Command: `{command}`", "", *machine_lines(records), "", *load_lines(records),
             f"Model: two inputs ({cfg['seq_len']}, {D}), one LSTM({H}) whose weights both "
             f"branches share, concatenation, Dense(1, sigmoid); mean binary cross-entropy, "
             f"plain SGD at lr {cfg['lr']}, batch {cfg['batch']}, {cfg['steps']} timed steps "
             f"after {cfg['warmup']} warm-up steps, seed {cfg['seed']}, {cfg['threads']} threads, "
             "each framework in a worker process of its own.", "",
             f"Task: {TASK}", "",
             "| " + " | ".join(h for _, h in COLUMNS) + " |",
             "|" + "---|" * len(COLUMNS)]
    for row in rows:
        lines.append("| " + " | ".join(str(row[k]).replace("|", "/") for k, _ in COLUMNS) + " |")
    lines += ["", "Columns: ms/step is the median of the timed steps (min-max), the devices "
              "synchronised before each clock read, warm-up excluded; two/one is the two-branch "
              "median over the one-device median (below 1: the split is faster). Bytes moved "
              "are computed from the shapes that cross between distinct devices in one step "
              "(inputs to the branches, the shared LSTM weights to branch b and their gradient "
              "back, the encodings to the merge and their gradients back), not measured. "
              "`vs 1 device` is the largest difference between the two placements' step "
              "losses, and between their parameters after the last step (0: identical).", "",
              "Without GPUs the two branches' devices are the framework's own CPU devices "
              "(TensorFlow/Keras logical devices, MXNet contexts): they share the same cores, "
              "so the split cannot be faster (ideal two/one: 1), and what it costs is the "
              "frameworks' cross-device machinery (a transfer between two CPU devices of one "
              "process may be a memcpy or a shared buffer; the bytes say what would cross "
              "between two GPUs). On two GPUs the branches can run at once.", "",
              "## Per framework: where the shared weights live, and notes", ""]
    order = {n: i for i, n in enumerate(registry.NAMES)}
    for r in sorted(records, key=lambda r: order.get(r["framework"], 99)):
        if r["placement"] != "two-branch":
            continue
        text = r.get("sharing") or ""
        extra = [x for x in (r.get("note"), r.get("error") if r["status"] != "ok" else None) if x]
        placed = r.get("placed")
        if placed:
            extra.append("Read back from the framework's arrays: h_a on " + placed["branch_a"]
                         + ", h_b on " + placed["branch_b"] + ", the output on " + placed["merge"]
                         + ", the shared weights on " + placed["weights"])
        lines.append(f"- **{r['framework']}**: " + " ".join(x.rstrip(".") + "." for x in [text, *extra] if x))
        if r.get("bytes_moved") and r["bytes_moved"]["total"]:
            parts = ", ".join(f"{k.replace('_', ' ')} {_mb(v)}" for k, v in r["bytes_moved"].items()
                              if k != "total")
            lines.append(f"  Bytes per step: {parts}.")
    return "\n".join(lines) + "\n"
