"""The emulated network of --launcher netns (common/launch/netns.py) on its own, no
engine: its links carry traffic between the nodes' namespaces at the rate asked for,
count it, and the namespaces go on every way out, a killed owner's at the next start."""
import signal
import subprocess
import sys
import time

import pytest

from common.launch import netns
from tests.conftest import ROOT, subprocess_env

pytestmark = pytest.mark.skipif(netns.unavailable() is not None,
                                reason=netns.unavailable() or "")

# node 1 listens, node 0 sends it N bytes: the seconds that took, as node 0 saw them
# once node 1 has read all of it
SEND = """
import socket, sys, time
role, n = sys.argv[1], int(sys.argv[2])
if role == "recv":
    s = socket.create_server(("0.0.0.0", 5001)); print("up", flush=True)
    c, _ = s.accept(); got = 0
    while got < n:
        got += len(c.recv(1 << 16))
    c.sendall(b"k")
else:
    c = socket.create_connection((sys.argv[3], 5001)); t = time.perf_counter()
    c.sendall(b"x" * n); c.recv(1); print(time.perf_counter() - t)
"""


def _send(net: netns.Network, nbytes: int, to: str) -> float:
    recv = subprocess.Popen(net.wrap(1, [sys.executable, "-c", SEND, "recv", str(nbytes)]),
                            stdout=subprocess.PIPE, text=True)
    try:
        assert recv.stdout.readline().strip() == "up"
        sent = subprocess.run(net.wrap(0, [sys.executable, "-c", SEND, "send", str(nbytes), to]),
                              capture_output=True, text=True, timeout=60)
        assert sent.returncode == 0, sent.stderr
        return float(sent.stdout)
    finally:
        recv.kill()
        recv.wait()


def _counted(net: netns.Network, node: int) -> dict:
    out = subprocess.run(net.wrap(node, [sys.executable, "-c",
                                         "from common.launch import netns; "
                                         f"print(netns.counters({netns.LINK_IF!r}))"]),
                         capture_output=True, text=True, cwd=ROOT, env=subprocess_env())
    return eval(out.stdout)


def test_a_shaped_link_carries_the_bytes_at_its_rate_and_counts_them():
    nbytes, rate = 2_000_000, "20mbit"
    with netns.running(2, rate) as net:
        before = _counted(net, 0)
        seconds = _send(net, nbytes, net.address(1))
        after = _counted(net, 0)
    # tbf lets a 256 kB burst through at once, then the rate
    floor = (nbytes - 256_000) * 8 / netns.rate_bits(rate)
    assert floor * 0.9 < seconds < floor * 3, (seconds, floor)
    assert after["tx"] - before["tx"] >= nbytes            # headers on top
    assert not [ns for ns in netns._namespaces() if net.run_id in ns]


def test_traffic_to_a_nodes_own_address_does_not_cross_its_link():
    """What the byte check of a run stands on: a node talking to itself (its own
    address, or loopback) leaves its link's counters alone."""
    with netns.running(2, netns.UNSHAPED) as net:
        # both ends in node 1's namespace: node 0 is not involved
        recv = subprocess.Popen(net.wrap(1, [sys.executable, "-c", SEND, "recv", "1000000"]),
                                stdout=subprocess.PIPE, text=True)
        try:
            assert recv.stdout.readline().strip() == "up"
            before = _counted(net, 1)
            done = subprocess.run(net.wrap(1, [sys.executable, "-c", SEND, "send", "1000000",
                                               net.address(1)]), capture_output=True, timeout=60)
            after = _counted(net, 1)
        finally:
            recv.kill()
            recv.wait()
    assert done.returncode == 0
    assert after["tx"] - before["tx"] < 10_000, (before, after)


def test_the_network_goes_when_its_block_fails():
    with pytest.raises(RuntimeError, match="planted"):
        with netns.running(2, "10mbit") as net:
            assert len([ns for ns in netns._namespaces() if net.run_id in ns]) == 3
            raise RuntimeError("planted")
    assert not [ns for ns in netns._namespaces() if net.run_id in ns]


def test_a_killed_owners_network_is_removed_at_the_next_start():
    owner = subprocess.Popen([sys.executable, "-c",
                              "import time; from common.launch import netns; "
                              "print(netns.create(2, '10mbit').run_id, flush=True); time.sleep(120)"],
                             stdout=subprocess.PIPE, text=True, cwd=ROOT, env=subprocess_env())
    run_id = owner.stdout.readline().strip()
    mine = lambda: [ns for ns in netns._namespaces() if f"-{run_id}-" in ns]  # noqa: E731
    assert run_id and len(mine()) == 3
    assert netns.clean_stale() == [] and len(mine()) == 3     # its owner lives: kept
    owner.send_signal(signal.SIGKILL)
    owner.wait()
    time.sleep(0.2)
    with netns.running(2, netns.UNSHAPED):
        assert mine() == []
    assert not (netns.STATE_DIR / run_id).exists()


def test_a_node_finds_its_own_address_and_interface():
    """What every engine is handed on a real machine (common.launch.nodes.Cluster.own):
    the route to the master's source address, or the node's --node-hosts entry unless
    that is loopback (a hostname that /etc/hosts maps to 127.0.x.1)."""
    show = ("import sys; from common.launch.nodes import Cluster; "
            "hosts = tuple(sys.argv[2].split(',')) if sys.argv[2] else None; "
            "print(*Cluster(2, (int(sys.argv[1]),), '10.77.0.1', 1, hosts, 1).own(int(sys.argv[1])))")
    with netns.running(2, netns.UNSHAPED) as net:
        def own(node, hosts=""):
            done = subprocess.run(net.wrap(node, [sys.executable, "-c", show, str(node), hosts]),
                                  capture_output=True, text=True, cwd=ROOT, env=subprocess_env())
            assert done.returncode == 0, done.stderr
            return done.stdout.split()
        assert own(1) == ["10.77.0.2", netns.LINK_IF]          # the route to the master
        assert own(0) == ["10.77.0.1", netns.LINK_IF]          # the master itself
        assert own(1, "10.77.0.1,10.77.0.2") == ["10.77.0.2", netns.LINK_IF]
        assert own(1, "10.77.0.1,localhost") == ["10.77.0.2", netns.LINK_IF]
