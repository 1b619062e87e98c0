"""The performance model's formulas, each written once: what a ring all-reduce sends and
how long it takes, and the chapter's batch rule. benchmarks.predict and benchmarks.links'
page predict with them; the emulated links' byte check (common/launch/netns.py) bounds
what a run's links must carry with them. Calculations, not measurements."""
from __future__ import annotations

from typing import Callable

# the chapter: a step's computation should exceed its communication by about 20 %
RULE = 1.2


def ring_bytes(p: float, n: int) -> float:
    """Bytes each of n nodes sends a step in a ring all-reduce of p bytes: 2(n-1)/n x p
    (reduce-scatter, then all-gather, each n-1 chunks of p/n)."""
    return 2 * (n - 1) / n * p


def ring_sec(nbytes: float, k: int, latency: float, bandwidth: float) -> float:
    """A ring all-reduce of nbytes over k devices: 2(k-1) latencies and each device's
    ring_bytes at the link's bandwidth (bytes/s); 0 on one device."""
    if k == 1:
        return 0.0
    return 2 * (k - 1) * latency + ring_bytes(nbytes, k) / bandwidth


def rule_batch(compute: Callable[[int], float], t2: float) -> int | None:
    """The smallest per-device batch (a power of two up to 65536) whose compute time is at
    least RULE x t2 (the communication of a step); None if none is."""
    for b in (2 ** i for i in range(17)):
        if compute(b) >= RULE * t2:
            return b
    return None
