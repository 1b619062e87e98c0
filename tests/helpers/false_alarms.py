"""How often benchmarks.report calls a change "slower" when nothing changed:
`python -m tests.helpers.false_alarms OUT [--folders N]` runs the same configuration N times
(benchmarks.compare, COMMAND below, each into OUT/runNN), then compares the folders as
A against A; `--count` only compares the folders already in OUT.

Counted twice: over the consecutive pairs (run01 against run02, run03 against run04,
...: measured one after the other, no folder in two pairs), and over every ordered pair
of different folders (many more, measured up to the whole session apart, but not
independent: each folder is in many). Each with the verdict of common.reports.verdict
and with the band-only rule it replaced (old_rule), on the same pairs; then the
verdict's rates on simulated repeats. The figures in docs/report.md come from here."""
from __future__ import annotations

import argparse
import functools
import itertools
import subprocess
import sys
from collections import Counter
from pathlib import Path

from common.facts.machine import cpu_line
import numpy as np

from common.reports import comparison, verdict
from common.results.record import load_records
from common.results.timing import timing

# short runs (about a minute each on 2 cores): two rows a folder, 3 repeats each
COMMAND = ["-m", "benchmarks.compare", "--framework", "pytorch", "--mode", "scratch,native",
           "--dataset", "synthetic", "--epochs", "1", "--steps-per-epoch", "10",
           "--eval-samples", "256", "--repeat", "3", "--peak-gemm-size", "0", "--no-plots"]


# The false-alarm check of tests/test_verdict.py: Welch's test at each of these repeat
# counts a side, on PAIRS simulated pairs each
REPEATS = (2, 3, 4, 5)
PAIRS = 50_000


def old_rule(before, after, band: float):
    """The verdict before issue 30: slower or faster when the ratio of the medians leaves
    a band, the larger of `band` and either side's spread ((max - min) / median; with
    one repeat the old rule took the spread of its epochs, 0 here). Of one pair (lists),
    or of many at once (arrays, the repeats on the last axis)."""
    def spread(xs):
        return np.ptp(xs, axis=-1) / np.median(xs, axis=-1)
    ratio = np.median(after, axis=-1) / np.median(before, axis=-1)
    wide = np.maximum(band, np.maximum(spread(before), spread(after)))
    return np.select([ratio > 1 + wide, ratio < 1 / (1 + wide)], ["slower", "faster"],
                     "within noise")


def simulated(rule, n: int, ratio: float = 1.0, band: float = comparison.DEFAULT_NOISE,
              sd: float = 0.1, draws: int = 2000) -> float:
    """How often `rule` says slower on `draws` pairs of n repeats a side drawn from
    log-normal distributions (sd of the logs `sd`: 10 %, as on these shared machines),
    the second `ratio` times the first (1: A against A). `rule` takes every pair at once
    (arrays of shape (draws, n): verdict.verdicts, old_rule)."""
    rng = np.random.default_rng(n)
    logs = rng.normal(0.0, sd, (draws, 2, n)) + [[0.0], [np.log(ratio)]]
    return float(np.mean(rule(np.exp(logs[:, 0]), np.exp(logs[:, 1]), band) == "slower"))


@functools.lru_cache(maxsize=None)
def welch_false_alarms(n: int, alpha: float = verdict.ALPHA) -> float:
    """The exact rate at which Welch's one-sided test at `alpha` says slower on A against
    A (n repeats a side from one normal distribution), by one integral. With d the
    difference of the means and v1, v2 the sides' variances (n - 1 degrees of freedom),
    Welch's t = d / sqrt((v1 + v2) / n) is Student's t with 2(n - 1) degrees of freedom
    (d is normal; (n - 1)(v1 + v2) / sigma^2 is chi-squared with 2(n - 1), independent of
    d), whatever the share r = v1 / (v1 + v2), which is Beta((n - 1)/2, (n - 1)/2) and
    independent of both; r sets Welch's degrees of freedom, (n - 1) / (r^2 + (1 - r)^2),
    and so the quantile that t must pass. Below alpha: Welch's test is cautious."""
    from scipy import integrate, stats
    a = (n - 1) / 2

    def alarm(r):
        quantile = stats.t.isf(alpha, (n - 1) / (r * r + (1 - r) ** 2))
        return stats.t.sf(quantile, 2 * (n - 1)) * stats.beta.pdf(r, a, a)
    return integrate.quad(alarm, 0, 1, limit=200)[0]


def count(folders: list[Path], pairs) -> tuple[Counter, Counter, int]:
    """(the new verdicts, the old rule's, the pairs) over the rows both folders of each
    pair hold."""
    records = {f: load_records(f) for f in folders}
    new, old, n = Counter(), Counter(), 0
    for a, b in pairs:
        n += 1
        for row in comparison.compare_folders(records[a], records[b]):
            new[row["verdict"]] += 1
        times = {comparison._key(r): timing(r)["runs"] for r in records[a] if r["status"] == "ok"}
        for r in records[b]:
            if r["status"] == "ok" and comparison._key(r) in times:
                said = old_rule(times[comparison._key(r)], timing(r)["runs"], comparison.DEFAULT_NOISE)
                old[str(said)] += 1
    return new, old, n


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.helpers.false_alarms", description=__doc__.split("\n\n")[0])
    p.add_argument("out", help="the folder of the runs (OUT/runNN)")
    p.add_argument("--folders", type=int, default=20, help="runs of the same configuration")
    p.add_argument("--count", action="store_true", help="count the folders already in OUT")
    args = p.parse_args(argv)
    out = Path(args.out)
    if not args.count:
        for i in range(1, args.folders + 1):
            subprocess.run([sys.executable, *COMMAND, "--out", str(out / f"run{i:02d}")],
                           check=True, stdout=subprocess.DEVNULL)
    # the finished runs (compare writes report.md last)
    folders = sorted(f.parent for f in out.glob("run*/report.md"))
    if len(folders) < 2:
        print(f"false_alarms: error: fewer than 2 finished runs in {out} (runNN/report.md)",
              file=sys.stderr)
        return 2
    print(f"{len(folders)} folders in {out}; {cpu_line(load_records(folders[0])[0].get('env') or {})}")
    print("command: python " + " ".join(COMMAND))
    for name, pairs in (("consecutive pairs", zip(folders[::2], folders[1::2])),
                        ("all ordered pairs", itertools.permutations(folders, 2))):
        new, old, n = count(folders, pairs)
        rows = sum(new.values())
        print(f"{name}: {n} pairs, {rows} rows; verdict: "
              + ", ".join(f"{k} {v} ({v / rows:.1%})" for k, v in sorted(new.items()))
              + "; old band rule: "
              + ", ".join(f"{k} {v} ({v / rows:.1%})" for k, v in sorted(old.items())))
    print("simulated (log-normal repeats, sd 10 %, 2000 pairs; slower, at the default band):")
    for ratio in (1.0, 1.3):
        print(f"  {ratio}x: " + ", ".join(f"{n} repeats {simulated(verdict.verdicts, n, ratio):.1%}"
                                          for n in (2, 3, 5)))
    print("with no band, A against A (Welch's test alone): " + ", ".join(
        f"{n} repeats {simulated(verdict.verdicts, n, band=0.0, draws=PAIRS):.2%} "
        f"(exactly {welch_false_alarms(n):.2%})" for n in REPEATS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
