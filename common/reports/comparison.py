"""Two results folders, or a folder and a history, compared row by row: each row's
sec/epoch before and after and the verdict on its repeats (common.reports.verdict)."""
from __future__ import annotations

import statistics

from rich import box
from rich.table import Table
from rich.text import Text

from common.reports import verdict
from common.reports.runs import mode_label
from common.results.timing import timing
from common.results.record import model_of, schedule_of

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
    return {"framework": r["framework"], "model": model_of(r),
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
