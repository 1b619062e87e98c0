"""The lines a run's process tells its parent on stdout: benchmarks.compare advances
its progress bar on them, a node's supervisor (common.launch.nodes) watches them to
know that a node joined and is alive. They never touch the device."""
from __future__ import annotations

import sys
from typing import Callable

STEP, ESTIMATE, JOINED, EVALUATED = "@step", "@estimate", "@joined", "@evaluated"
# a rank about to join its engine's process group (torchrun and Paddle's launcher start
# it once their rendezvous is through)
STARTED = "@started"


def say(line: str) -> Callable[[], None]:
    """A callback that tells the parent process one line."""
    def tell():
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
    return tell


def estimate_printer() -> Callable[[float], None]:
    """Tells the parent process the estimated seconds per epoch, measured in warm-up."""
    def on_estimate(seconds):
        sys.stdout.write(f"{ESTIMATE} {seconds:.3f}\n")
        sys.stdout.flush()
    return on_estimate


def silent(*args) -> None:
    """The callback of a run that tells nobody."""


def forward(line: str) -> None:
    """Pass on a line that a rank told (a node's supervisor forwards its ranks' lines)."""
    sys.stdout.write(line)
    sys.stdout.flush()
