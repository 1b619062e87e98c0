"""Emulated machines on this computer (--network netns): every node of a run in a Linux
network namespace of its own, with its own address on an interface LINK_IF, the nodes
joined by veth links through a bridge, each node's egress shaped to a rate with `tc ...
tbf` (or unshaped). The bridge lives in a namespace of the run too, so nothing touches
this machine's own network and deleting the run's namespaces deletes all of it.

Names carry a short run id (`dlc-<id>-n0`, `dlc-<id>-sw`); the owner's pid and start
time are kept in STATE_DIR/<id>, and a set whose owner is gone (a run killed with
SIGKILL, a Ctrl-C'd worker) is removed by `clean_stale`, called at every start and by
benchmarks.runner after every worker."""
from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

from common import models
from common.core import perf

PREFIX = "dlc-"
STATE_DIR = Path("/run/dl-compare-netns")
SUBNET = "10.77.0"            # a private test range, only inside the run's namespaces
LINK_IF = "link0"             # each node's interface, inside its namespace
LINK_ENV = "DL_COMPARE_LINK_IF"   # tells a node's lead rank the interface to count
PORT = 29500                  # a fresh namespace has every port free
# tbf's bucket: what passes at the CPU's speed after an idle spell (a step's compute
# refills it), so small against a step's traffic, else a slow link looks faster than its
# rate (a 256 KB bucket let half of LeNet's 516 KB a step through at 10 Mbit/s); but at
# least 2 ms of the rate, or fast rates fall short of theirs (16 KB gave 680 of 1000
# Mbit/s here). Measured: docs/nodes.md
BURST_MIN, BURST_SEC = 16 * 1024, 0.002
TBF_LATENCY = ("latency", "200ms")


def tbf(rate: str) -> list[str]:
    """tc's arguments shaping a link's egress to rate."""
    burst = max(BURST_MIN, int(rate_bits(rate) / 8 * BURST_SEC))
    return ["tbf", "rate", rate, "burst", str(burst), *TBF_LATENCY]
UNSHAPED = "unshaped"
_RATE = re.compile(r"^(\d+(?:\.\d+)?)(kbit|mbit|gbit)$")
_UNITS = {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9}


class NetnsError(RuntimeError):
    pass


def rate_bits(rate: str) -> float | None:
    """A --link rate in bits per second (None: unshaped); ValueError when it is neither
    `unshaped` nor a number with kbit, mbit or gbit (tc's units)."""
    if rate == UNSHAPED:
        return None
    m = _RATE.match(rate)
    if not m or float(m.group(1)) <= 0:
        raise ValueError(f"--link {rate!r} is not a rate like 100mbit, 1gbit, 500kbit, "
                         "or unshaped")
    return float(m.group(1)) * _UNITS[m.group(2)]


def unavailable() -> str | None:
    """Why this machine cannot emulate nodes (None when it can)."""
    if os.geteuid() != 0:
        return "--network netns needs root (network namespaces, veth links, tc)"
    missing = [t for t in ("ip", "tc") if shutil.which(t) is None]
    if missing:
        return f"--network netns needs {' and '.join(missing)} (Debian: apt-get install iproute2)"
    return None


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(args, capture_output=True, text=True)
    if check and done.returncode:
        raise NetnsError(f"`{' '.join(args)}` failed: {done.stderr.strip()}")
    return done


def _start_time(pid: int) -> str | None:
    """A process's start time (field 22 of /proc/PID/stat): a pid alone may be reused."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _namespaces() -> list[str]:
    return [line.split()[0] for line in _ip("ip", "netns", "list", check=False).stdout.splitlines()
            if line.startswith(PREFIX)]


def _owner_alive(run_id: str) -> bool:
    try:
        pid, started = (STATE_DIR / run_id).read_text().split()
    except (OSError, ValueError):
        return False
    return _start_time(int(pid)) == started


def clean_stale() -> list[str]:
    """Remove every run's namespaces whose owner is gone; the names removed."""
    gone = []
    for ns in _namespaces():
        run_id = ns[len(PREFIX):].split("-")[0]
        if not _owner_alive(run_id):
            _ip("ip", "netns", "del", ns, check=False)
            (STATE_DIR / run_id).unlink(missing_ok=True)
            gone.append(ns)
    return gone


@dataclass(frozen=True)
class Network:
    """One run's emulated nodes: node i is namespace ns(i) with address address(i)."""
    run_id: str
    nodes: int
    rate: str                  # "unshaped" or a tc rate (100mbit)

    @property
    def switch(self) -> str:
        return f"{PREFIX}{self.run_id}-sw"

    def ns(self, node: int) -> str:
        return f"{PREFIX}{self.run_id}-n{node}"

    def address(self, node: int) -> str:
        return f"{SUBNET}.{node + 1}"

    def wrap(self, node: int, argv: list[str]) -> list[str]:
        """argv run inside node's namespace."""
        return ["ip", "netns", "exec", self.ns(node), *argv]

    def state(self) -> str:
        """What each node's link is like now, for a stalled run's message: down, or shaped
        to another rate than the run's (a fault on the link), else as the run set it up."""
        notes = []
        for n in range(self.nodes):
            shown = _ip("ip", "-n", self.ns(n), "-o", "link", "show", LINK_IF, check=False).stdout
            flags = re.search(r"<([^>]*)>", shown)
            if not flags:
                notes.append(f"node {n}'s link {LINK_IF} is gone")
                continue
            if "UP" not in flags.group(1).split(","):
                notes.append(f"node {n}'s link {LINK_IF} is down")
            qdisc = _ip("tc", "-n", self.ns(n), "qdisc", "show", "dev", LINK_IF, check=False).stdout
            shaped = re.search(r"tbf .*?rate (\d+(?:\.\d+)?)([KMG]?)bit", qdisc)
            bits = (float(shaped.group(1)) * {"": 1, "K": 1e3, "M": 1e6, "G": 1e9}[shaped.group(2)]
                    if shaped else None)
            if bits != rate_bits(self.rate):
                shaped_to = f"{bits:g} bit/s" if bits else "no rate"
                notes.append(f"node {n}'s link {LINK_IF} is shaped to {shaped_to}, "
                             f"not the run's {self.rate}")
        return "; ".join(notes) or f"every link is up at the run's {self.rate}"

    def link(self) -> dict:
        """What a record says of the link."""
        return {"kind": "veth pairs through a bridge (network namespaces)", "rate": self.rate,
                "rate_bit_s": rate_bits(self.rate), "interface": LINK_IF,
                "addresses": [self.address(n) for n in range(self.nodes)]}


def create(nodes: int, rate: str) -> Network:
    """Make a run's namespaces and links (removing stale sets first); remove with
    `remove`. NetnsError names the command that failed."""
    why = unavailable()
    if why:
        raise NetnsError(why)
    clean_stale()
    net = Network(secrets.token_hex(3), nodes, rate)
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    (STATE_DIR / net.run_id).write_text(f"{os.getpid()} {_start_time(os.getpid())}")
    try:
        sw = net.switch
        _ip("ip", "netns", "add", sw)
        _ip("ip", "-n", sw, "link", "add", "br0", "type", "bridge")
        _ip("ip", "-n", sw, "link", "set", "br0", "up")
        for n in range(nodes):
            ns = net.ns(n)
            _ip("ip", "netns", "add", ns)
            # made inside the namespaces: no name ever appears in this machine's own stack
            _ip("ip", "-n", sw, "link", "add", f"p{n}", "type", "veth", "peer", "name", LINK_IF,
                "netns", ns)
            _ip("ip", "-n", sw, "link", "set", f"p{n}", "master", "br0", "up")
            _ip("ip", "-n", ns, "addr", "add", f"{net.address(n)}/24", "dev", LINK_IF)
            _ip("ip", "-n", ns, "link", "set", LINK_IF, "up")
            _ip("ip", "-n", ns, "link", "set", "lo", "up")
            if rate != UNSHAPED:
                _ip("tc", "-n", ns, "qdisc", "replace", "dev", LINK_IF, "root",
                    *tbf(rate))
    except BaseException:
        remove(net)
        raise
    return net


def remove(net: Network) -> None:
    for ns in [net.switch, *(net.ns(n) for n in range(net.nodes))]:
        _ip("ip", "netns", "del", ns, check=False)
    (STATE_DIR / net.run_id).unlink(missing_ok=True)


class running:
    """`with running(nodes, rate) as net:` the network for the block, removed on every
    way out of it; SIGTERM becomes SystemExit meanwhile, so that it is removed then too
    (SIGKILL leaves it to clean_stale)."""

    def __init__(self, nodes: int, rate: str):
        self.nodes, self.rate = nodes, rate

    def __enter__(self) -> Network:
        self.net = create(self.nodes, self.rate)
        try:
            self.old = signal.signal(signal.SIGTERM, _exit_on_term)
        except ValueError:            # not the main thread: leave SIGTERM as it is
            self.old = None
        return self.net

    def __exit__(self, *exc) -> None:
        if self.old is not None:
            signal.signal(signal.SIGTERM, self.old)
        remove(self.net)


def _exit_on_term(signum, frame):
    raise SystemExit(128 + signum)


def counters(interface: str) -> dict[str, int]:
    """The bytes this namespace's interface has sent and received so far."""
    stats = Path("/sys/class/net") / interface / "statistics"
    return {k: int((stats / f"{k}_bytes").read_text()) for k in ("tx", "rx")}


# The byte check's bound, as a share of the 2(n-1) x P a step that both kinds of engine
# move over all the links: measured runs carried 1.002-1.084 of it (headers on top; every
# record in docs/results/links), and an engine that sends half its gradients elsewhere
# (over a node's own loopback) about 0.5, so three quarters sits 1.3x or more from both.
# Half, the former bound, passed that engine.
LEAST_SHARE = 0.75


def carried(per_node: list[dict | None], nodes: int, model, steps: int,
            share: float = 1.0) -> dict:
    """What the links carried in the timed epochs (each node's bytes sent and received),
    beside the least that data parallelism must send: `short` says why not, else None.
    Both engines here move 2(n-1) x P bytes over all the links per step, P the gradients'
    bytes (a ring all-reduce sends 2(n-1)/n x P from each of n nodes; with parameter
    servers, each worker pushes every key that another node serves and pulls it back,
    2 x P x (n-1)/n a worker whichever node serves it); LEAST_SHARE of that is the bound,
    so that headers never trip it while a part of the traffic that went elsewhere (over
    a node's own loopback) does. `share`: the part of P that the run's settings put on the
    link (a gradient compression: settings.wire_share)."""
    gradient = models.param_bytes(model.NAME)
    least = int(LEAST_SHARE * nodes * perf.ring_bytes(gradient * share, nodes) * steps)
    out = {"tx_bytes": [c and c["tx"] for c in per_node],
           "rx_bytes": [c and c["rx"] for c in per_node], "gradient_bytes": gradient,
           "timed_steps": steps, "least_bytes": least, "short": None,
           **({"wire_share": share} if share != 1.0 else {})}
    sent = sum(out["tx_bytes"]) if None not in out["tx_bytes"] else None
    if sent is None:
        out["short"] = "a node's lead did not count its link's bytes"
    elif sent < least:
        out["short"] = (f"the nodes' links carried {sent} bytes in the {steps} timed steps, less "
                        f"than {least}, {LEAST_SHARE:g} of the 2(n-1) x {gradient}"
                        + (f" x {share:g}" if share != 1.0 else "") + " bytes a step "
                        "that an all-reduce of the gradients moves: the traffic did not cross "
                        "the link (some of it went over a node's own loopback?)")
    return out
