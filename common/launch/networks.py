"""The networks a run across several machines runs on (compare --network), one class
each, registered in NETWORKS: real machines given by hand, real machines from a Slurm
allocation, every node on this machine's loopback, every node emulated in a network
namespace of its own. A kind says how its options must look (or where it reads them:
an allocation), which nodes run here, whether they share this machine's cores, how its
network comes up (the nodes.Cluster and the record's "link") and goes, and what its
links carried. Nothing else compares a kind's name: adding one is one class here and one
row in NETWORKS.

Records and plans written before the option was named --network keep the kind under
"launcher", with the old names (cluster, local, netns; a Slurm run's as cluster, with its
"slurm"): `of` reads both."""
from __future__ import annotations

import contextlib
import os
from abc import ABC, abstractmethod
from pathlib import Path
from typing import ContextManager

from common import models
from common.core.plan import RunConfig
from common.facts import settings
from common.launch import launcher, netns, nodes, slurm


class NetworkError(ValueError):
    """A network's options that do not fit: one line that says the fix."""


def placement_given(args) -> list[str]:
    """The options that place this machine among real ones, as given on the command line
    (a kind that places the nodes itself, or simulates them here, refuses them)."""
    return [o for o, v in (("--node-rank", args.node_rank), ("--master", args.master),
                           ("--node-hosts", args.node_hosts)) if v is not None]


class Network(ABC):
    name = ""              # --network NAME, and the record's "network"
    old_name = ""          # its name under --launcher, accepted for one release ("": none)
    about = ""             # one line for --help and errors
    # whether the nodes share this machine's cores: threads are split between them and
    # the ideal speed-up over nodes is 1
    shares_cores = True
    note = ""              # what the report adds after "devices counts those of every node"

    def place(self, args) -> None:
        """Fill in args' several-machine options (--nodes, --node-rank, --master,
        --node-hosts) where this kind reads them (an allocation), before they are checked;
        NetworkError with the fix. Nothing where they are given by hand."""

    def check(self, args) -> None:
        """Validate args (compare's options) for this network, normalising them in place;
        NetworkError with the fix."""
        if args.link is not None:
            raise NetworkError(f"--link shapes the links of emulated nodes: add --network "
                               f"{Netns.name}")

    def local_nodes(self, cfg) -> tuple[int, ...]:
        """The node ranks that run on this machine."""
        return tuple(range(cfg.nodes))

    def knows_every_host(self, cfg) -> bool:
        """Whether every node's address is known before the run (TF_CONFIG lists them)."""
        return True

    @abstractmethod
    def up(self, cfg) -> ContextManager[tuple[nodes.Cluster, dict]]:
        """The network for the block: the cluster of cfg's nodes and what the record says
        of its link; taken down on every way out."""

    def carried(self, counted: list[dict | None], cfg, steps: int) -> dict:
        """What the links carried in the `steps` timed steps (`counted`: each node's link
        byte counters, None where it has none), added to the record's link; its "short"
        says why that fails the run. {} where no link counts."""
        return {}

    def clean_stale(self) -> None:
        """Remove what a killed run of this kind left behind."""


class Machines(Network):
    name, old_name = "machines", "cluster"
    about = "this machine is one of the --nodes, the others real machines running the same command"
    shares_cores = False

    def check(self, args) -> None:
        super().check(args)
        if args.node_rank is None or args.master is None:
            raise NetworkError(f"--nodes {args.nodes} on machines needs this machine's "
                               "--node-rank and node 0's --master HOST:PORT (or --network "
                               f"{Loopback.name} to simulate the nodes here)")
        if args.node_rank >= args.nodes:
            raise NetworkError(f"--node-rank {args.node_rank} is not one of the {args.nodes} "
                               f"nodes (0 to {args.nodes - 1})")
        host, _, port = args.master.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise NetworkError(f"--master {args.master!r} is not HOST:PORT (e.g. 10.0.0.1:29500)")
        if args.node_hosts is not None:
            hosts = [h.strip() for h in args.node_hosts.split(",")]
            if "" in hosts or len(hosts) != args.nodes:
                raise NetworkError(f"--node-hosts lists {len(hosts)} hosts for --nodes "
                                   f"{args.nodes}; give one per node, in node order")
            args.node_hosts = hosts

    def where(self, cfg) -> tuple[int, str, int, tuple[str, ...] | None]:
        """(this machine's node rank, node 0's host and port, every node's host or None):
        from the options here; a kind whose nodes an allocation gives reads them there."""
        host, port = cfg.master.rsplit(":", 1)
        return cfg.node_rank, host, int(port), tuple(cfg.node_hosts) if cfg.node_hosts else None

    def local_nodes(self, cfg) -> tuple[int, ...]:
        return (self.where(cfg)[0],)

    def knows_every_host(self, cfg) -> bool:
        return self.where(cfg)[3] is not None

    @contextlib.contextmanager
    def up(self, cfg):
        rank, host, port, hosts = self.where(cfg)
        cluster = nodes.Cluster(cfg.nodes, (rank,), host, port, hosts, cfg.join_timeout)
        address, interface = cluster.own(rank)
        yield cluster, {"kind": "this machine's network", "address": address,
                        "interface": interface}


class Slurm(Machines):
    """Machines from a Slurm allocation (common/launch/slurm.py): this process is one task
    of `srun --ntasks-per-node=1`, and the step's nodes, this node's rank and the master
    come from srun's variables; engines with Slurm support of their own use it (JAX)."""
    name, old_name = "slurm", "slurm"
    about = ("this is one task of `srun --ntasks-per-node=1`, the nodes are the step's (each "
             "node's records in --out/node<R>)")

    def place(self, args) -> None:
        given = placement_given(args) + ["--link"] * (args.link is not None)
        if given:
            raise NetworkError(f"--network {self.name} reads the nodes from the allocation: "
                               f"drop {given[0]}")
        try:
            alloc = slurm.allocation(os.environ)
        except slurm.SlurmError as e:
            raise NetworkError(str(e)) from None
        if args.nodes not in (1, alloc.nodes):
            raise NetworkError(f"--nodes {args.nodes}, but the srun step runs on {alloc.nodes} "
                               f"nodes ({alloc.node_list}): drop --nodes, or srun -N {args.nodes}")
        if alloc.nodes == 1:
            raise NetworkError(f"the srun step runs on 1 node ({alloc.node_list}): srun -N 2 or "
                               f"more, or drop --network {self.name}")
        args.nodes, args.node_rank, args.master = alloc.nodes, alloc.node_rank, alloc.master
        args.node_hosts, args.slurm = ",".join(alloc.hosts), alloc.record()
        # each node's records in a folder of its own: the nodes may share a file system
        out = Path(args.out) if args.out else Path("results") / f"slurm-{alloc.job_id}"
        args.out = str(out / f"node{alloc.node_rank}")


class _Here(Network):
    """Every node on this machine: the options that place a real machine do not apply."""

    def check(self, args) -> None:
        super().check(args)
        self.no_placement(args)

    def no_placement(self, args) -> None:
        given = placement_given(args)
        if given:
            raise NetworkError(f"--network {self.name} simulates every node here: drop {given[0]}")


class Loopback(_Here):
    name, old_name = "loopback", "local"
    about = "simulate every node here, on localhost, each with its own processes"
    note = (f", here simulated on this machine (--network {name}: each node its own "
            "processes on localhost)")

    @contextlib.contextmanager
    def up(self, cfg):
        yield (nodes.Cluster(cfg.nodes, self.local_nodes(cfg), "127.0.0.1", launcher.free_port(),
                             None, cfg.join_timeout),
               {"kind": "loopback (the nodes share this machine's network stack)"})


class Netns(_Here):
    name, old_name = "netns", "netns"
    about = ("emulate every node here, each in a network namespace of its own with its own "
             "address, joined by links of --link's rate (needs root, ip and tc)")

    def check(self, args) -> None:
        # the one kind that takes --link (not Network.check's refusal)
        args.link = args.link or netns.UNSHAPED
        try:
            netns.rate_bits(args.link)
        except ValueError as e:
            raise NetworkError(str(e)) from None
        why = netns.unavailable()
        if why:
            raise NetworkError(f"{why}; or --network {Loopback.name}, every node on loopback")
        self.no_placement(args)

    @contextlib.contextmanager
    def up(self, cfg):
        with netns.running(cfg.nodes, cfg.link) as net:
            addresses = tuple(net.address(n) for n in range(cfg.nodes))
            yield (nodes.Cluster(cfg.nodes, self.local_nodes(cfg), addresses[0], netns.PORT,
                                 addresses, cfg.join_timeout, net),
                   net.link())

    def carried(self, counted, cfg, steps):
        return netns.carried(counted, cfg.nodes, models.get(cfg.model), steps,
                             settings.wire_share(cfg.framework, cfg.settings))

    def clean_stale(self) -> None:
        netns.clean_stale()


NETWORKS: dict[str, Network] = {k.name: k for k in (Machines(), Slurm(), Loopback(), Netns())}
# RunConfig's default (common.core, below this layer, names it; the test holds it a kind)
DEFAULT = RunConfig.network
# --launcher's values, read for one release: old name -> the kind
OLD_NAMES = {k.old_name: k.name for k in NETWORKS.values() if k.old_name}


def get(name: str) -> Network:
    try:
        return NETWORKS[name]
    except KeyError:
        raise NetworkError(f"no network {name!r}: one of {', '.join(NETWORKS)}") from None


def of(record: dict) -> Network:
    """The network of a record, a run's config or a stored plan's options: its "network",
    or the "launcher" of one written before (old names); the default (one machine's
    network) where it has neither."""
    if record.get("network"):
        return get(record["network"])
    old = record.get("launcher")
    return get(OLD_NAMES.get(old, old) if old else DEFAULT)
