"""Runs across several machines, each framework on its own distributed engine, started
its own documented way (common/launch/engines.py: one class per engine, the processes a
node runs).

A node runs the processes `node_processes` lists; `supervise` starts them, passes the
lead's progress lines on, and ends the run as failed, killing every local process,
when a process fails, when the node has not joined within the join timeout (a node
that never starts), or when its lead falls silent for that long after joining (a
node that died). Every rank process is common/launch/rank.py. Every engine is handed
the node's own address and interface (Cluster.own); on --network netns each node
runs in a network namespace of its own (common/launch/netns.py). Which nodes run here,
and on what network, is common/launch/networks.py's."""
from __future__ import annotations

import ipaddress
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from common.launch import engines, netns, progress, slurm
from common.launch.engines import Proc
from common.launch.launcher import ROOT, LaunchError, child_env, log_tail


@dataclass(frozen=True)
class Cluster:
    """Where a run's nodes are: N nodes, this process's share of them, the master."""
    nodes: int
    local_nodes: tuple[int, ...]        # the node ranks started here (common.launch.networks)
    master_addr: str
    master_port: int
    hosts: tuple[str, ...] | None       # every node's address (TF_CONFIG lists all workers)
    join_timeout: float
    net: netns.Network | None = None    # --network netns: every node in a namespace of its own

    @property
    def master_ip(self) -> str:
        """The master's address, for engines that take no host name (Slurm gives names):
        ZeroMQ binds MXNet's scheduler to it; Paddle's launcher hosts its rendezvous only
        where it equals the node's own address."""
        return socket.gethostbyname(self.master_addr)

    def host(self, node: int) -> str:
        return self.hosts[node] if self.hosts else self.master_addr

    def own(self, node: int) -> tuple[str, str | None]:
        """Node's own address and the interface that carries it, handed to every engine:
        engines that advertise the hostname's address would otherwise offer loopback where
        the hostname resolves to it (Debian's 127.0.1.1). From --node-hosts, else from the
        route to the master."""
        if self.net is not None:
            return self.net.address(node), netns.LINK_IF
        if self.hosts:
            addr = socket.gethostbyname(self.hosts[node])
            if not ipaddress.ip_address(addr).is_loopback or self.all_loopback:
                return own_address(addr)
        return own_address(socket.gethostbyname(self.master_addr), route=True)

    @property
    def all_loopback(self) -> bool:
        """Every node on this machine's loopback (a test's cluster of one machine)."""
        return all(ipaddress.ip_address(socket.gethostbyname(h)).is_loopback
                   for h in (self.master_addr, *(self.hosts or ())))


def own_address(addr: str, route: bool = False) -> tuple[str, str | None]:
    """(address, interface) of this machine: `addr` itself, or with `route` the source
    address of this machine's route to `addr` (what `ip route get` shows); the interface
    holding it from `ip -o addr` (None where `ip` is missing or none holds it: NAT)."""
    if ipaddress.ip_address(addr).is_loopback:
        return addr, "lo"
    if route:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((addr, 9))            # picks the route's source address; sends nothing
            addr = s.getsockname()[0]
    try:
        shown = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True,
                               text=True).stdout
    except OSError:
        return addr, None
    for line in shown.splitlines():         # "4: eth0    inet 10.0.0.1/24 brd ..."
        fields = line.split()
        if len(fields) > 3 and fields[3].split("/")[0] == addr:
            return addr, fields[1]
    return addr, None


def node_processes(cfg, cluster: Cluster, node: int, out_dir: Path) -> list[Proc]:
    """The processes node `node` runs, started the framework's own way, each told the
    node's own address and interface the way its engine documents (common to all: gloo's
    and NCCL's socket interface variables, which JAX's gloo collectives read too, via
    frameworks/jax)."""
    procs = engines.of_framework(cfg.framework).processes(cfg, cluster, node, out_dir)
    interface = cluster.own(node)[1]
    for p in procs:
        if interface:
            p.env.update(GLOO_SOCKET_IFNAME=interface, NCCL_SOCKET_IFNAME=interface)
        if cfg.slurm:        # engines with Slurm support of their own use it (JAX)
            p.env[slurm.CLUSTER_ENV] = slurm.CLUSTER
        if cluster.net is not None:
            p.argv = cluster.net.wrap(node, p.argv)
            if p.lead:       # the lead counts the link's bytes around the timed epochs
                p.env[netns.LINK_ENV] = netns.LINK_IF
    return procs


def _stop(procs: list[subprocess.Popen]) -> None:
    """SIGTERM first (torchrun and Paddle's launcher stop their workers on it), then
    SIGKILL; rank processes also die with their parent (common/launch/rank.py)."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 5
    for p in procs:
        try:
            p.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def supervise(procs: list[Proc], env: dict, log_dir: Path, join_timeout: float,
              on_line: Callable[[str], None], master: str = "the master",
              links: Callable[[], str] | None = None, stall_timeout: float | None = None
              ) -> None:
    """Run the processes of this machine's nodes until every one has ended; raise
    LaunchError (after stopping them all) when one fails, a node does not join within
    join_timeout seconds, or a joined node's lead is silent for stall_timeout (by default
    join_timeout); `links` says what
    the links are like then (emulated nodes: one down or throttled is named). Every
    process's output, both streams, goes to its log in log_dir, which a failure copies
    to stderr."""
    log_dir.mkdir(parents=True, exist_ok=True)
    lines: queue.Queue = queue.Queue()
    running, logs = [], []
    first_node = min(p.node for p in procs)
    stall = stall_timeout or join_timeout
    try:
        for i, p in enumerate(procs):
            log = log_dir / f"node{p.node}-{p.role}{i}.log"
            logs.append(log)
            proc = subprocess.Popen(
                # unbuffered: a process killed on a time-out leaves what it said in its log
                p.argv, env={**env, **p.env, "DL_COMPARE_NODE": str(p.node),
                             "PYTHONUNBUFFERED": "1"},
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                # pinned before it starts: its thread pools and its children's start there
                preexec_fn=(lambda c=p.cores: os.sched_setaffinity(0, c)) if p.cores else None)
            running.append(proc)

            def read(proc=proc, i=i, log=log):
                with open(log, "w") as f:
                    for line in proc.stdout:
                        f.write(line)
                        f.flush()
                        if line.startswith("@"):
                            lines.put((i, line))
            threading.Thread(target=read, daemon=True).start()
        leads = {i for i, p in enumerate(procs) if p.lead}
        start = time.monotonic()
        started = set()                        # leads whose rank process runs
        heard = {i: None for i in leads}       # when each lead last spoke after joining
        while True:
            try:
                i, line = lines.get(timeout=0.2)
                if i in leads:
                    started.add(i)
                    if line.startswith(progress.JOINED) or heard[i] is not None:
                        heard[i] = time.monotonic()
                    if procs[i].node == first_node and line.startswith("@"):
                        on_line(line)
            except queue.Empty:
                pass
            codes = [p.poll() for p in running]
            bad = [i for i, c in enumerate(codes) if c not in (None, 0)]
            if bad:
                i = bad[0]
                _copy_logs(log_dir)
                raise LaunchError(f"node {procs[i].node}'s {procs[i].role} exited with code "
                                  f"{codes[i]}: {log_tail(logs[i])}")
            if all(codes[i] == 0 for i in leads):
                others = [p for i, p in enumerate(running) if i not in leads]
                for p in others:            # servers and the scheduler end with the workers
                    try:
                        p.wait(10)
                    except subprocess.TimeoutExpired:
                        pass
                return
            now = time.monotonic()
            for i in leads:
                if codes[i] is not None:
                    continue
                why = None
                if heard[i] is None and now - start > join_timeout:
                    why = (f"node {procs[i].node} never joined the run within {join_timeout:g} s "
                           "(--join-timeout): " + (
                               f"its rank started but did not get through the engine's "
                               f"rendezvous at {master} and its connections to the other "
                               "nodes (an address or interface the others cannot reach?)"
                               if i in started else
                               f"its rank never started: the rendezvous at {master} was never "
                               "reached (a node that never started, or a --master it cannot "
                               "reach)"))
                elif heard[i] is not None and now - heard[i] > stall:
                    why = (f"node {procs[i].node} joined, then made no progress for "
                           f"{stall:g} s (--stall-timeout): a collective stalled (a node "
                           "died or hangs, or the link between them is down)")
                if why:
                    if links:
                        why += f"; the links now: {links()}"
                    _copy_logs(log_dir)
                    raise LaunchError(f"{why}; its log: {log_tail(logs[i]) or '(empty)'}")
    finally:
        _stop(running)


def _copy_logs(log_dir: Path) -> None:
    """Every log of the run (each process's, and those the engines' launchers write
    there) into this process's stderr (compare keeps it as the run's log), since the
    node's folder is removed with the run."""
    for log in sorted(p for p in log_dir.rglob("*") if p.is_file()):
        try:
            sys.stderr.write(f"--- {log.relative_to(log_dir)} ---\n"
                             f"{log.read_text(errors='replace')}\n")
        except OSError:
            pass
    sys.stderr.flush()


def run(cfg, cluster: Cluster, out_dir: Path, on_line: Callable[[str], None],
        cores: dict[int, list[int]] | None = None) -> list[dict]:
    """Run cfg on this machine's nodes of the cluster and return each local node's
    result (its lead's record), node by node; with `cores`, node i's processes are
    pinned to cores[i]."""
    procs = [p for node in cluster.local_nodes for p in node_processes(cfg, cluster, node, out_dir)]
    for p in procs:
        p.cores = cores[p.node] if cores else None
    # a node's rank processes share its threads (torchrun would set 1 where this is
    # unset); MXNet and JAX run one worker process per node
    per_node = 1 if engines.of_framework(cfg.framework).one_worker_per_node else cfg.devices
    per_rank = max(1, cfg.threads // per_node)
    env = child_env(per_rank)
    supervise(procs, env, out_dir / "logs", cluster.join_timeout, on_line,
              f"{cluster.master_addr}:{cluster.master_port}",
              cluster.net.state if cluster.net else None, cfg.stall_timeout)
    results = []
    for node in cluster.local_nodes:
        path = out_dir / f"node{node}.json"
        if not path.is_file():
            raise LaunchError(f"node {node} ended without writing its result ({path})")
        results.append(json.loads(path.read_text()))
    return results
