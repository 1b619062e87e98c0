"""Machines from Slurm: inside an allocation, `srun --ntasks-per-node=1` starts the same
compare on every node, and each reads where it is from the variables srun sets for its
task (`allocation(os.environ)`): the step's nodes (SLURM_STEP_NODELIST, Slurm's host-list
syntax, `n[01-04],gpu7`), this node's place among them (SLURM_NODEID), how many
(SLURM_STEP_NUM_NODES) and the job (SLURM_JOB_ID, which picks the master's port). The
engines are then started as on any machines (common/launch/nodes.py); JAX finds its
coordinator and process id in the same variables itself (jax.distributed's Slurm
detection), told to by CLUSTER_ENV."""
from __future__ import annotations

from dataclasses import dataclass

# set in the environment of every process a node starts when the nodes came from Slurm:
# engines with Slurm support of their own use it there (JAX)
CLUSTER_ENV, CLUSTER = "DL_COMPARE_CLUSTER", "slurm"
# the master's port, from the job id: two jobs sharing a node get different ports, and
# the TF_CONFIG workers' ports above it (port + 1 + i, i < 15) stay clear of the next job's
PORT_BASE, PORT_SPAN, PORT_STRIDE = 29500, 500, 16
COMMAND = "srun -N NODES --ntasks-per-node=1 python -m benchmarks.compare --network slurm ..."


class SlurmError(ValueError):
    """The environment is not one srun task per node of an allocation: the message says
    what was wrong and what to run."""


def expand_hostlist(text: str) -> list[str]:
    """Slurm's host-list syntax expanded as `scontrol show hostnames` does: `node[1-3,5],gpu01`
    -> node1 node2 node3 node5 gpu01; a range keeps its zero padding (`n[08-10]` -> n08 n09
    n10) and brackets may follow one another (`r[1-2]n[1-2]` -> r1n1 r1n2 r2n1 r2n2)."""
    hosts, rest = [], text.strip()
    while rest:
        name = _one_host(rest)
        hosts.extend(_expand(rest[:name]))
        rest = rest[name:].lstrip(",").strip()
    if not hosts:
        raise SlurmError(f"the node list {text!r} names no node")
    return hosts


def _one_host(text: str) -> int:
    """The length of the first comma-separated entry of a host list (commas inside
    brackets belong to the entry)."""
    depth = 0
    for i, ch in enumerate(text):
        depth += {"[": 1, "]": -1}.get(ch, 0)
        if depth not in (0, 1):
            raise SlurmError(f"the node list {text!r} has unbalanced brackets")
        if ch == "," and depth == 0:
            return i
    if depth:
        raise SlurmError(f"the node list {text!r} has an unclosed bracket")
    return len(text)


def _expand(entry: str) -> list[str]:
    head, sep, tail = entry.partition("[")
    if not sep:
        if "]" in entry:
            raise SlurmError(f"the node list entry {entry!r} has unbalanced brackets")
        return [entry]
    ranges, _, after = tail.partition("]")
    return [head + mid + end for mid in _ranges(ranges, entry) for end in _expand(after)]


def _ranges(text: str, entry: str) -> list[str]:
    out = []
    for part in text.split(","):
        lo, dash, hi = part.strip().partition("-")
        if not lo.isdigit() or (dash and not hi.isdigit()):
            raise SlurmError(f"the node list entry {entry!r} has {part!r} where a number or a "
                             "range like 1-3 goes")
        if not dash:
            out.append(lo)
            continue
        if int(hi) < int(lo):
            raise SlurmError(f"the node list entry {entry!r} has the range {part!r} backwards")
        out.extend(str(i).zfill(len(lo)) for i in range(int(lo), int(hi) + 1))
    return out


@dataclass(frozen=True)
class Allocation:
    """This srun task's view of the allocation: node `node_rank` of `hosts` (the step's
    nodes, by Slurm's names, in its order), the master on the first of them."""
    job_id: int
    step_id: str | None
    node_list: str                  # as Slurm wrote it
    hosts: tuple[str, ...]
    node_rank: int

    @property
    def nodes(self) -> int:
        return len(self.hosts)

    @property
    def master_host(self) -> str:
        return self.hosts[0]

    @property
    def port(self) -> int:
        return PORT_BASE + (self.job_id % PORT_SPAN) * PORT_STRIDE

    @property
    def master(self) -> str:
        return f"{self.master_host}:{self.port}"

    def record(self) -> dict:
        """What a run's record keeps of it: the nodes came from this job and step."""
        return {"job_id": self.job_id, "step_id": self.step_id, "node_list": self.node_list,
                "hosts": list(self.hosts), "node_rank": self.node_rank}


def _first(environ, *names: str) -> str | None:
    return next((environ[n] for n in names if environ.get(n)), None)


def _integer(environ, *names: str) -> int | None:
    text = _first(environ, *names)
    if text is None:
        return None
    if not text.strip().isdigit():
        name = next(n for n in names if environ.get(n))
        raise SlurmError(f"{name}={text!r} is not a number: is this an srun task?")
    return int(text)


def allocation(environ) -> Allocation:
    """The allocation from srun's variables (the step's where srun set them, the job's
    otherwise); SlurmError when this is not one srun task per node of a job."""
    job_id = _integer(environ, "SLURM_JOB_ID", "SLURM_JOBID")
    if job_id is None:
        raise SlurmError(f"--network slurm runs inside a Slurm allocation (no SLURM_JOB_ID "
                         f"here): {COMMAND}")
    node_rank = _integer(environ, "SLURM_NODEID")
    node_list = _first(environ, "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST")
    if node_rank is None or node_list is None:
        raise SlurmError(f"job {job_id} is allocated but this is not an srun task (no "
                         f"SLURM_NODEID or node list): start it on every node with {COMMAND}")
    hosts = tuple(expand_hostlist(node_list))
    count = _integer(environ, "SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES")
    if count is not None and count != len(hosts):
        raise SlurmError(f"Slurm says {count} nodes but its node list {node_list!r} names "
                         f"{len(hosts)}")
    if node_rank >= len(hosts):
        raise SlurmError(f"SLURM_NODEID={node_rank} is not one of the {len(hosts)} nodes of "
                         f"{node_list!r}")
    tasks = _integer(environ, "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS")
    if tasks is not None and tasks != len(hosts):
        raise SlurmError(f"the step runs {tasks} tasks on {len(hosts)} nodes: the suite starts "
                         f"each node's processes itself, so run one task per node: {COMMAND}")
    return Allocation(job_id, _first(environ, "SLURM_STEP_ID", "SLURM_STEPID"), node_list,
                      hosts, node_rank)
