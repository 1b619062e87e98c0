"""Runs across several machines, each framework on its own distributed engine, started
its own documented way (no launcher of ours beyond local processes):

- torchrun: `python -m torch.distributed.run` with c10d rendezvous at the master;
- paddle.distributed.launch with `--master`, which runs its own HTTP rendezvous;
- TF_CONFIG: TensorFlow has no launcher; every worker is started with TF_CONFIG naming
  the whole cluster and joins a MultiWorkerMirroredStrategy (RING collectives on CPU);
- jax.distributed: JAX has no launcher either; one process per node holds the node's
  devices and calls jax.distributed.initialize with the master as its coordinator
  (gloo collectives on CPU);
- DMLC: MXNet's parameter server, the chapters' `dist_sync` KVStore: a scheduler at the
  master, a server and a worker per node, given their roles in DMLC_* variables as
  MXNet's tools/launch.py gives them.

A node runs the processes `node_processes` lists; `supervise` starts them, passes the
lead's progress lines on, and ends the run as failed, killing every local process,
when a process fails, when the node has not joined within the join timeout (a node
that never starts), or when its lead falls silent for that long after joining (a
node that died). Every rank process is common/launch/rank.py."""
from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from common.facts import registry
from common.launch import progress
from common.launch.launcher import ROOT, LaunchError, RankInfo, child_env, log_tail

RANK_SCRIPT = ROOT / "common" / "launch" / "rank.py"
# How each framework's engine starts on a node (registry.Framework.cluster names one)
LAUNCHERS = {
    "torchrun": "torchrun (torch.distributed.run, c10d rendezvous; gloo on CPU, nccl on GPUs)",
    "paddle-launch": "paddle.distributed.launch (its HTTP rendezvous at --master; gloo on "
                     "CPU, nccl on GPUs)",
    "tf-config": "a worker per device started with TF_CONFIG, MultiWorkerMirroredStrategy "
                 "(RING collectives)",
    "jax-distributed": "a process per node holding its devices, jax.distributed.initialize "
                       "with the master as coordinator (gloo collectives on CPU)",
    "dmlc": "MXNet dist_sync KVStore (parameter server): a scheduler, a server and a worker "
            "per node, roles in DMLC_* variables",
}

# the launchers that run one worker process per node, holding all of its devices
ONE_WORKER_PER_NODE = ("dmlc", "jax-distributed")


@dataclass(frozen=True)
class Cluster:
    """Where a run's nodes are: N nodes, this process's share of them, the master."""
    nodes: int
    local_nodes: tuple[int, ...]        # the node ranks started here (all with --launcher local)
    master_addr: str
    master_port: int
    hosts: tuple[str, ...] | None       # every node's address (TF_CONFIG lists all workers)
    join_timeout: float

    def host(self, node: int) -> str:
        return self.hosts[node] if self.hosts else self.master_addr


@dataclass
class Proc:
    node: int
    role: str                 # "worker", or for MXNet also "server", "scheduler"
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    lead: bool = False        # writes the node's record and tells its progress
    cores: list[int] | None = None     # pinned to these cores (--cores-per-device)


def _rank_argv(cfg_json: str, out_dir: Path, role: str = "worker") -> list[str]:
    return [str(RANK_SCRIPT), cfg_json, str(out_dir), role]


def node_processes(cfg, cluster: Cluster, node: int, out_dir: Path) -> list[Proc]:
    """The processes node `node` runs, started the framework's own way."""
    kind = registry.facts(cfg.framework).cluster
    k, n = cfg.devices, cluster.nodes
    cfg_json = json.dumps(cfg.to_dict())
    py = registry.python(cfg.framework)
    if kind == "torchrun":
        return [Proc(node, "worker", [
            py, "-m", "torch.distributed.run", f"--nnodes={n}", f"--nproc-per-node={k}",
            f"--node-rank={node}", "--rdzv-backend=c10d",
            f"--rdzv-endpoint={cluster.master_addr}:{cluster.master_port}",
            f"--rdzv-id=dl-compare-{cluster.master_port}", "--max-restarts=0",
            # node 0 hosts the rendezvous store (--master is its address); torchrun's own
            # join timeout is left longer than ours, which ends the run first, with its message
            f"--rdzv-conf=is_host={int(node == 0)},join_timeout={int(cluster.join_timeout) + 60}",
            *_rank_argv(cfg_json, out_dir)], lead=True)]
    if kind == "paddle-launch":
        return [Proc(node, "worker", [
            py, "-m", "paddle.distributed.launch", "--master",
            f"{cluster.master_addr}:{cluster.master_port}", "--nnodes", str(n), "--rank", str(node),
            "--nproc_per_node", str(k), "--max_restart", "0", "--job_id",
            f"dl-compare-{cluster.master_port}", "--log_dir", str(out_dir / f"paddle-node{node}"),
            *_rank_argv(cfg_json, out_dir)], lead=True)]
    if kind == "tf-config":
        # a worker per device, each on its own port of its node's host
        workers = [f"{cluster.host(m)}:{cluster.master_port + 1 + m * k + i}"
                   for m in range(n) for i in range(k)]
        procs = []
        for i in range(k):
            index = node * k + i
            tf_config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
            procs.append(Proc(node, "worker", [py, *_rank_argv(cfg_json, out_dir)], {
                "TF_CONFIG": json.dumps(tf_config), **_rank_env(index, n * k, i, k, cluster),
                # on a GPU machine, worker i's device is its GPU i (its only one)
                "CUDA_VISIBLE_DEVICES": str(i)}, lead=i == 0))
        return procs
    if kind == "jax-distributed":
        return [Proc(node, "worker", [py, *_rank_argv(cfg_json, out_dir)],
                     _rank_env(node, n, 0, 1, cluster), lead=True)]
    if kind == "dmlc":
        dmlc = {"DMLC_PS_ROOT_URI": cluster.master_addr, "DMLC_PS_ROOT_PORT": str(cluster.master_port),
                "DMLC_NUM_SERVER": str(n), "DMLC_NUM_WORKER": str(n),
                "DMLC_NODE_HOST": cluster.host(node)}
        procs = [Proc(node, "scheduler", [py, *_rank_argv(cfg_json, out_dir, "scheduler")],
                      {**dmlc, "DMLC_ROLE": "scheduler"})] if node == 0 else []
        procs.append(Proc(node, "server", [py, *_rank_argv(cfg_json, out_dir, "server")],
                          {**dmlc, "DMLC_ROLE": "server"}))
        # one worker per node holds its k devices; the scheduler numbers the workers
        procs.append(Proc(node, "worker", [py, *_rank_argv(cfg_json, out_dir)],
                          {**dmlc, "DMLC_ROLE": "worker", **_rank_env(node, n, 0, 1, cluster)},
                          lead=True))
        return procs
    raise LaunchError(f"{cfg.framework} has no multi-node launcher")


def _rank_env(rank: int, world: int, local: int, local_world: int, cluster: Cluster) -> dict:
    return RankInfo(rank, world, local, local_world, cluster.master_addr,
                    cluster.master_port).env()


def servers(framework: str, nodes: int) -> int | None:
    """How many parameter servers a run has (MXNet's: one per node); None without any."""
    return nodes if registry.facts(framework).cluster == "dmlc" else None


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
              on_line: Callable[[str], None]) -> None:
    """Run the processes of this machine's nodes until every one has ended; raise
    LaunchError (after stopping them all) when one fails, a node does not join within
    join_timeout seconds, or a joined node's lead is silent that long."""
    log_dir.mkdir(parents=True, exist_ok=True)
    lines: queue.Queue = queue.Queue()
    running, logs = [], []
    first_node = min(p.node for p in procs)
    try:
        for i, p in enumerate(procs):
            log = log_dir / f"node{p.node}-{p.role}{i}.log"
            logs.append(log)
            proc = subprocess.Popen(
                p.argv, env={**env, **p.env, "DL_COMPARE_NODE": str(p.node)},
                stdout=subprocess.PIPE, stderr=open(log, "w"), text=True, cwd=ROOT,
                # pinned before it starts: its thread pools and its children's start there
                preexec_fn=(lambda c=p.cores: os.sched_setaffinity(0, c)) if p.cores else None)
            running.append(proc)

            def read(proc=proc, i=i):
                for line in proc.stdout:
                    lines.put((i, line))
            threading.Thread(target=read, daemon=True).start()
        leads = {i for i, p in enumerate(procs) if p.lead}
        start = time.monotonic()
        heard = {i: None for i in leads}       # when each lead last spoke after joining
        while True:
            try:
                i, line = lines.get(timeout=0.2)
                if i in leads:
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
                _copy_log(logs[i])
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
                if heard[i] is None and now - start > join_timeout:
                    raise LaunchError(
                        f"node {procs[i].node} did not join the run within "
                        f"{join_timeout:g} s (--join-timeout): a node that never started, or "
                        "a --master that the nodes cannot reach")
                if heard[i] is not None and now - heard[i] > join_timeout:
                    raise LaunchError(
                        f"node {procs[i].node} made no progress for {join_timeout:g} s after "
                        "joining (--join-timeout): a node died or hangs")
    finally:
        _stop(running)


def _copy_log(log: Path) -> None:
    """A failed process's log into this process's stderr (compare keeps it as the
    run's log), since the node's folder is removed with the run."""
    try:
        sys.stderr.write(f"--- {log.name} ---\n{log.read_text(errors='replace')}\n")
        sys.stderr.flush()
    except OSError:
        pass


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
    per_node = 1 if registry.facts(cfg.framework).cluster in ONE_WORKER_PER_NODE else cfg.devices
    per_rank = max(1, cfg.threads // per_node)
    env = child_env(per_rank)
    supervise(procs, env, out_dir / "logs", cluster.join_timeout, on_line)
    results = []
    for node in cluster.local_nodes:
        path = out_dir / f"node{node}.json"
        if not path.is_file():
            raise LaunchError(f"node {node} ended without writing its result ({path})")
        results.append(json.loads(path.read_text()))
    return results
