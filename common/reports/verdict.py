"""Slower, faster, within noise, or too few repeats to say: the verdict on a change of
sec/epoch from one set of repeats to another (benchmarks.report A B, and the gate
against the history), one rule for both.

The test is Welch's t-test (scipy.stats; the two sides' spreads need not be equal) on
the log of each repeat's sec/epoch, so that it speaks of the ratio after / before, as
the band does. With d the difference of the mean logs (the log of the ratio of the
geometric means) and m = log(1 + band):

- slower: d > m, and the one-sided test says d > 0 at ALPHA;
- faster: d < -m, and the one-sided test says d < 0 at ALPHA;
- within noise: both one-sided tests say -m < d < m at ALPHA (an equivalence test,
  TOST): the change is shown to be smaller than the band, not merely not shown;
- too few repeats: none of these, or a side with fewer than 2 repeats (no spread to test
  against). The rows then say how many repeats a side would decide, were the means and
  spreads to stay as measured.

The band is the smallest change worth a verdict: a difference the repeats make certain
but smaller than it (a machine's drift between two folders) is not "slower". Measured
false-alarm rates are in docs/report.md."""
from __future__ import annotations

import bisect
import math

import numpy as np

ALPHA = 0.05               # one-sided, each test
MOST_REPEATS = 20          # how far "too few repeats" looks for the count that decides
TOO_FEW = "too few repeats"


def _p(before, after, shift: float, alternative: str):
    """Welch's one-sided p-value for mean log after - shift against mean log before
    (each side (mean, sd, n) of its log times, the means and sds arrays of many pairs or
    numbers); 1 where undefined (no spread, no change)."""
    from scipy import stats        # imported on use: about 0.3 s, and only comparisons need it
    with np.errstate(all="ignore"):
        p = stats.ttest_ind_from_stats(after[0] - shift, after[1], after[2], *before,
                                       equal_var=False, alternative=alternative).pvalue
    return np.where(np.isnan(p), 1.0, p)


def _decide(before, after, band: float) -> tuple:
    """(verdict, its p-value) of two sides given as (mean, sd, n) of their log times: of
    one pair (numbers), or arrays of them for many pairs at once."""
    d, m = after[0] - before[0], math.log1p(band)
    slower, faster = _p(before, after, 0.0, "greater"), _p(before, after, 0.0, "less")
    within = np.maximum(_p(before, after, m, "less"), _p(before, after, -m, "greater"))
    said = np.select([(d > m) & (slower < ALPHA), (d < -m) & (faster < ALPHA), within < ALPHA],
                     ["slower", "faster", "within noise"], TOO_FEW)
    return said, np.select([said == "slower", said == "faster"], [slower, faster], within)


def _sides(before, after) -> list[tuple]:
    """Each side as (mean, sd, n) of its log times (the repeats on the last axis: one
    pair's lists, or an array of many pairs' repeats)."""
    out = []
    for xs in (before, after):
        logs, n = np.log(xs), np.shape(xs)[-1]
        out.append((logs.mean(-1), logs.std(-1, ddof=1) if n > 1 else None, n))
    return out


def verdict(before: list[float], after: list[float], band: float) -> dict:
    """The verdict on the repeats' sec/epoch before and after: {"verdict", "ratio" (of
    the geometric means), "p" (of the verdict's test; None with too few repeats),
    "repeats" (before, after)}."""
    sides = _sides(before, after)
    out = {"verdict": TOO_FEW, "p": None, "ratio": float(np.exp(sides[1][0] - sides[0][0])),
           "repeats": (len(before), len(after))}
    if min(out["repeats"]) < 2:
        return out
    said, p = _decide(*sides, band)
    return out if said == TOO_FEW else {**out, "verdict": str(said), "p": float(p)}


def verdicts(before, after, band: float) -> np.ndarray:
    """The verdicts of many pairs at once (arrays of shape (pairs, repeats), 2 or more
    repeats a side): what verdict() says of each pair, as one array (tests/helpers/false_alarms.py
    simulates tens of thousands)."""
    return _decide(*_sides(before, after), band)[0]


def needed(before: list[float], after: list[float], band: float) -> int | None:
    """Where the verdict is too few repeats: the repeats a side that would decide it were
    the means and spreads to stay as measured; None when a side has fewer than 2 (no
    spread to go on) or more than MOST_REPEATS would be needed."""
    sides = _sides(before, after)
    if min(n for _, _, n in sides) < 2:
        return None
    # the tests only sharpen as n grows, so the first n that decides is found by bisection
    counts = range(max(n for _, _, n in sides) + 1, MOST_REPEATS + 1)
    first = bisect.bisect_left(counts, True, key=lambda n: _decide(
        *((m, s, n) for m, s, _ in sides), band)[0] != TOO_FEW)
    return counts[first] if first < len(counts) else None


def says(v: dict, needs: int | None = None) -> str:
    """The verdict in words: with its p-value, or with the repeats a side it needs."""
    if v["verdict"] != TOO_FEW:
        return v["verdict"] + (f" (p {v['p']:.3f})" if v["p"] >= 0.001 else " (p < 0.001)")
    if min(v["repeats"]) < 2:
        return f"{TOO_FEW}: 2 or more a side needed"
    return f"{TOO_FEW}: " + (f"about {needs} a side would decide" if needs
                             else f"more than {MOST_REPEATS} a side needed")
