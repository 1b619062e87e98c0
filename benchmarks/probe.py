"""t2, the link's own all-reduce: torch's gloo ring of a model's gradients on emulated
nodes with nothing beside it (benchmarks.workers.link_probe on each node), which
benchmarks.links sets each engine's step against and benchmarks.settings measures in
every round across nodes; and whether this machine can emulate nodes for it."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from common.facts import registry
from common.launch import netns
from common.launch.launcher import thread_env

from .cli import UsageError

ROOT = Path(__file__).resolve().parent.parent
PS_RING = "pytorch"             # the probe's ring (set against the parameter server too)
PROBE_REPEATS = 5
PROBE_IFNAME = netns.LINK_IF    # the interface gloo's probe binds (tests plant another)


def probe(out: Path, nodes: int, rate: str, nbytes: int, timeout: float = 600) -> None:
    """t2 alone: benchmarks.workers.link_probe on `nodes` emulated nodes at `rate`; its JSON
    (or the error) in `out`."""
    started = time.monotonic()
    out.parent.mkdir(parents=True, exist_ok=True)     # no compute run made it (--runs nodes)
    with netns.running(nodes, rate) as net:
        procs = [subprocess.Popen(net.wrap(n, [
            sys.executable, "-m", "benchmarks.workers.link_probe", str(n), str(nodes), net.address(0),
            str(netns.PORT), str(nbytes), str(PROBE_REPEATS), str(out)]), cwd=ROOT,
            env={**os.environ, **thread_env(1), "GLOO_SOCKET_IFNAME": PROBE_IFNAME}, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True) for n in range(nodes)]
        try:
            logs = [p.communicate(timeout=max(1.0, timeout - (time.monotonic() - started)))[0]
                    for p in procs]
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            logs = [f"timed out after {timeout:.0f} s"]
    if any(p.returncode for p in procs) or not out.is_file():
        out.write_text(json.dumps({"error": "\n".join(logs)[-2000:]}))
    print(f"probe {nodes} nodes {rate}: {out}", flush=True)


def can_emulate() -> None:
    """UsageError where this machine cannot emulate nodes or run the link probe (t2)."""
    why = netns.unavailable()
    if why:
        raise UsageError(why)
    if not registry.is_installed(PS_RING):
        raise UsageError("the link probe is torch's gloo all-reduce: install pytorch "
                         f"({registry.install_hint(PS_RING)})")
