"""Faults on an emulated link in the middle of a run (issue 29's part 6): a ring engine
(PyTorch's DDP) whose node 1 loses its link, then the parameter server (MXNet) whose
node 1's link is throttled to a crawl, in one compare command. Each run ends as failed
within the stated bound (--stall-timeout of no progress, then the stop), its message
naming the stalled node and the link at fault; no process or namespace of either run is
left, and the first run's record survives the second.

Collected in tests/test_nodes.py: pytest runs a file's tests in one worker, and the node
tests there count and kill rank processes and namespaces machine-wide."""
import json
import os
import subprocess
import sys
import threading
import time

import pytest

from common.launch import netns
from common.facts import registry
from tests.conftest import ROOT, subprocess_env

# on each test, not the module's pytestmark: test_nodes.py imports the tests alone
NEEDS_NETNS = pytest.mark.skipif(netns.unavailable() is not None,
                                 reason=netns.unavailable() or "")

STALL = 6                 # --stall-timeout: seconds of no progress before the run ends
BOUND = STALL + 30        # fault to record: the stall, a step in flight, the stop, the write
CUT = ("link", "set", netns.LINK_IF, "down")
CRAWL = ("qdisc", "replace", "dev", netns.LINK_IF, "root", "tbf", "rate", "1kbit",
         "burst", "2kb", "latency", "1s")


def _sent(ns: str) -> int:
    shown = subprocess.run(["ip", "-j", "-s", "-n", ns, "link", "show", netns.LINK_IF],
                           capture_output=True, text=True).stdout
    try:
        return json.loads(shown)[0]["stats64"]["tx"]["bytes"]
    except (ValueError, IndexError, KeyError):
        return 0


def _descends(pid: int, ancestor: int) -> bool:
    while pid > 1:
        if pid == ancestor:
            return True
        try:
            pid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            return False
    return False


def _ours(ns: str, compare: int) -> bool:
    """Whether the namespace belongs to a run of our compare (tests beside this one run
    emulated nodes too): its owner, in the state file, is one of compare's workers."""
    try:
        owner = int((netns.STATE_DIR / ns[len(netns.PREFIX):].split("-")[0]).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return False
    return _descends(owner, compare)


def _saboteur(compare: int, faults, done: list, stop: threading.Event):
    """For each fault in turn: wait for a new run of `compare` whose node 1 has sent a few
    of LeNet's all-reduces (it joined and is stepping), note its processes, then fault its
    link."""
    seen = set()
    for tool, args in faults:
        while not stop.is_set():
            busy = [ns for ns in netns._namespaces() if ns.endswith("-n1") and ns not in seen
                    and _ours(ns, compare) and _sent(ns) > 3_000_000]
            if busy:
                ns = busy[0]
                seen.add(ns)
                pids = {p for n in (ns, ns[:-1] + "0") for p in subprocess.run(
                    ["ip", "netns", "pids", n], capture_output=True, text=True).stdout.split()}
                subprocess.run([tool, "-n", ns, *args], check=True)
                done.append({"ns": ns, "at": time.time(), "pids": pids})
                break
            time.sleep(0.2)


@NEEDS_NETNS
@pytest.mark.skipif(not all(map(registry.is_installed, ("pytorch", "mxnet"))),
                    reason="needs pytorch and mxnet installed")
def test_a_cut_and_a_throttled_link_end_their_runs_in_bound_naming_the_link(tmp_path):
    done, stop = [], threading.Event()
    with subprocess.Popen(
            [sys.executable, "-m", "benchmarks.compare", "--framework", "pytorch,mxnet",
             "--nodes", "2", "--network", "netns", "--link", "100mbit", "--devices", "1",
             "--dataset", "synthetic", "--steps-per-epoch", "400", "--epochs", "1",
             "--batch-size", "64", "--stall-timeout", str(STALL), "--peak-gemm-size", "0",
             "--no-plots", "--out", str(tmp_path)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
            env=subprocess_env()) as run:
        saboteur = threading.Thread(target=_saboteur, daemon=True, args=(
            run.pid, [("ip", CUT), ("tc", CRAWL)], done, stop))
        saboteur.start()
        try:
            output = run.communicate(timeout=600)[0]
        finally:
            stop.set()
            run.kill()
    assert len(done) == 2, output[-3000:]
    records = {f: json.loads((tmp_path / f"{f}-native-2nodes-1dev.json").read_text())
               for f in ("pytorch", "mxnet")}
    for (framework, says), fault in zip((("pytorch", "node 1's link link0 is down"),
                                         ("mxnet", "node 1's link link0 is shaped to 1000 bit/s")),
                                        done):
        r = records[framework]
        assert r["status"] == "failed", r
        assert "made no progress" in r["error"] and says in r["error"], r["error"]
        ended = (tmp_path / f"{framework}-native-2nodes-1dev.json").stat().st_mtime
        assert ended - fault["at"] < BOUND, (framework, ended - fault["at"])
        assert fault["ns"] not in netns._namespaces()          # its network is gone
        alive = [p for p in fault["pids"] if os.path.exists(f"/proc/{p}")]
        assert not alive, (framework, alive)                   # and its processes
    assert run.returncode == 1        # failed runs, recorded: not a crash of compare


@NEEDS_NETNS
def test_the_links_state_names_a_link_down_and_one_throttled():
    """What the stalled run's message says of the links, on its own: as set up, then one
    node's link down and the other's throttled (the faults above, each seen here)."""
    with netns.running(2, "100mbit") as net:
        assert net.state() == "every link is up at the run's 100mbit"
        subprocess.run(["ip", "-n", net.ns(1), *CUT], check=True)
        subprocess.run(["tc", "-n", net.ns(0), *CRAWL], check=True)
        assert net.state() == ("node 0's link link0 is shaped to 1000 bit/s, not the run's "
                               "100mbit; node 1's link link0 is down")
