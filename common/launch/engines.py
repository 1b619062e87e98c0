"""How each framework's distributed engine starts on a node of a run across several
machines, one class each, registered in ENGINES (a framework's `engine_starter` fact
names one), each started its own documented way (no launcher of ours beyond local
processes):

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

An engine says the processes a node runs (each told the node's own address the way the
engine documents; common.launch.nodes adds what every engine is told, and supervises
them), whether it runs one worker per node holding the node's devices or one per device,
whether it needs every node's address before the run, and how many parameter servers it
has. Nothing else compares an engine's name: adding one is one class here and one row in
ENGINES (and its name in the framework's facts). A record keeps the engine's line
(`about`) as "engine_starter" ("cluster_launcher" in records before): `of` reads both."""
from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path

from common.core import perf
from common.facts import registry
from common.launch.launcher import ROOT, LaunchError, RankInfo

RANK_SCRIPT = ROOT / "common" / "launch" / "rank.py"


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


def _rank_env(rank: int, world: int, local: int, local_world: int, cluster) -> dict:
    return RankInfo(rank, world, local, local_world, cluster.master_addr,
                    cluster.master_port).env()


class Engine(ABC):
    name = ""                  # the framework's engine_starter fact
    about = ""                 # how it starts, in one line: the record's "engine_starter"
    # one worker process per node, holding all of the node's devices (else one per device)
    one_worker_per_node = False
    # why it needs every node's address before the run ("": it does not)
    needs_every_host = ""

    def servers(self, nodes: int, placement: str) -> int | None:
        """How many parameter servers a run on `nodes` nodes has (compare --servers
        `placement`); None without any."""
        return None

    @abstractmethod
    def processes(self, cfg, cluster, node: int, out_dir: Path) -> list[Proc]:
        """The processes node `node` of `cluster` (a common.launch.nodes.Cluster) runs for
        cfg, each told the node's own address (cluster.own) the way the engine documents."""


class Torchrun(Engine):
    name = "torchrun"
    about = "torchrun (torch.distributed.run, c10d rendezvous; gloo on CPU, nccl on GPUs)"

    def processes(self, cfg, cluster, node, out_dir):
        return [Proc(node, "worker", [
            registry.python(cfg.framework), "-m", "torch.distributed.run",
            f"--nnodes={cluster.nodes}", f"--nproc-per-node={cfg.devices}",
            f"--node-rank={node}", "--rdzv-backend=c10d",
            f"--rdzv-endpoint={cluster.master_addr}:{cluster.master_port}",
            f"--rdzv-id=dl-compare-{cluster.master_port}", "--max-restarts=0",
            # the address this agent advertises to the others (else its hostname's)
            f"--local-addr={cluster.own(node)[0]}",
            # node 0 hosts the rendezvous store (--master is its address); torchrun's own
            # join timeout is left longer than ours, which ends the run first, with its message
            f"--rdzv-conf=is_host={int(node == 0)},join_timeout={int(cluster.join_timeout) + 60}",
            *_rank_argv(json.dumps(cfg.to_dict()), out_dir)], lead=True)]


class PaddleLaunch(Engine):
    name = "paddle-launch"
    about = ("paddle.distributed.launch (its HTTP rendezvous at --master; gloo on CPU, nccl "
             "on GPUs)")

    def processes(self, cfg, cluster, node, out_dir):
        return [Proc(node, "worker", [
            registry.python(cfg.framework), "-m", "paddle.distributed.launch", "--master",
            f"{cluster.master_ip}:{cluster.master_port}", "--nnodes", str(cluster.nodes),
            "--rank", str(node),
            "--host", cluster.own(node)[0],   # the endpoint its ranks advertise (else the hostname's)
            "--nproc_per_node", str(cfg.devices), "--max_restart", "0", "--job_id",
            f"dl-compare-{cluster.master_port}",
            "--log_dir", str(out_dir / "logs" / f"paddle-node{node}"),   # copied on failure
            *_rank_argv(json.dumps(cfg.to_dict()), out_dir)], lead=True)]


class TfConfig(Engine):
    name = "tf-config"
    about = ("a worker per device started with TF_CONFIG, MultiWorkerMirroredStrategy "
             "(RING collectives)")
    needs_every_host = "TF_CONFIG lists every worker's address"

    def processes(self, cfg, cluster, node, out_dir):
        k, n = cfg.devices, cluster.nodes
        argv = [registry.python(cfg.framework), *_rank_argv(json.dumps(cfg.to_dict()), out_dir)]
        # a worker per device, each on its own port of its node's host
        workers = [f"{cluster.host(m)}:{cluster.master_port + 1 + m * k + i}"
                   for m in range(n) for i in range(k)]
        procs = []
        for i in range(k):
            index = node * k + i
            tf_config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
            procs.append(Proc(node, "worker", list(argv), {
                "TF_CONFIG": json.dumps(tf_config), **_rank_env(index, n * k, i, k, cluster),
                # on a GPU machine, worker i's device is its GPU i (its only one)
                "CUDA_VISIBLE_DEVICES": str(i)}, lead=i == 0))
        return procs


class JaxDistributed(Engine):
    name = "jax-distributed"
    about = ("a process per node holding its devices, jax.distributed.initialize with the "
             "master as coordinator (gloo collectives on CPU)")
    one_worker_per_node = True

    def processes(self, cfg, cluster, node, out_dir):
        return [Proc(node, "worker", [registry.python(cfg.framework),
                                      *_rank_argv(json.dumps(cfg.to_dict()), out_dir)],
                     _rank_env(node, cluster.nodes, 0, 1, cluster), lead=True)]


class Dmlc(Engine):
    name = "dmlc"
    about = ("MXNet dist_sync KVStore (parameter server): a scheduler, a server and a worker "
             "per node, roles in DMLC_* variables")
    one_worker_per_node = True

    def servers(self, nodes, placement):
        return perf.server_count(nodes, placement)

    def processes(self, cfg, cluster, node, out_dir):
        n = cluster.nodes
        py, cfg_json = registry.python(cfg.framework), json.dumps(cfg.to_dict())
        addr, interface = cluster.own(node)
        count = self.servers(n, cfg.servers)
        dmlc = {"DMLC_PS_ROOT_URI": cluster.master_ip, "DMLC_PS_ROOT_PORT": str(cluster.master_port),
                "DMLC_NUM_SERVER": str(count), "DMLC_NUM_WORKER": str(n),
                # the address ps-lite advertises, and the interface it would take it from
                "DMLC_NODE_HOST": addr, **({"DMLC_INTERFACE": interface} if interface else {})}
        procs = [Proc(node, "scheduler", [py, *_rank_argv(cfg_json, out_dir, "scheduler")],
                      {**dmlc, "DMLC_ROLE": "scheduler"})] if node == 0 else []
        if node < count:        # one server: node 0's
            procs.append(Proc(node, "server", [py, *_rank_argv(cfg_json, out_dir, "server")],
                              {**dmlc, "DMLC_ROLE": "server"}))
        # one worker per node holds its k devices; the scheduler numbers the workers
        procs.append(Proc(node, "worker", [py, *_rank_argv(cfg_json, out_dir)],
                          {**dmlc, "DMLC_ROLE": "worker", **_rank_env(node, n, 0, 1, cluster)},
                          lead=True))
        return procs


ENGINES: dict[str, Engine] = {e.name: e for e in (Torchrun(), PaddleLaunch(), TfConfig(),
                                                   JaxDistributed(), Dmlc())}


def get(name: str) -> Engine:
    if name not in ENGINES:
        raise LaunchError(f"no engine starter {name!r}: one of {', '.join(ENGINES)}")
    return ENGINES[name]


def of_framework(framework: str) -> Engine:
    """The engine a framework starts across machines (its engine_starter fact)."""
    starter = registry.facts(framework).engine_starter
    if not starter:
        raise LaunchError(f"{framework} has no engine starter across machines")
    return get(starter)


def engine_starter(record: dict) -> str | None:
    """The line a record keeps of how its engine started across machines (records before
    the name: "cluster_launcher"); None for a run on one machine."""
    return record.get("engine_starter") or record.get("cluster_launcher")


def of(record: dict) -> Engine | None:
    """The engine a record's run started across machines, from the line it keeps; None
    for a run on one machine."""
    line = engine_starter(record)
    return next((e for e in ENGINES.values() if e.about == line), None) if line else None
