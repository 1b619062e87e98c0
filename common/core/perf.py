"""The performance model, each formula written once: a ring all-reduce's bytes and time,
MXNet's parameter server as arithmetic (which server holds which key, the bytes each
node's link sends, how long the key-by-key exchange keeps the links busy), one device's
compute as a law of the batch fitted to measured points, a step on k devices from them,
and the chapter's batch rule. benchmarks.predict and benchmarks.links' page
(common/reports/links.py) predict with them; the emulated links' byte check
(common/launch/netns.py) bounds what a run's links must carry with them. Calculations,
not measurements.

MXNet's parameter server, from MXNet 1.9.1's source, no MXNet imported (the links page
runs where MXNet is not installed):
From MXNet 1.9.1's source:
- gluon's Trainer numbers its parameters 0, 1, ... in the order the network registered
  them (`_param2idx`) and, with update_on_kvstore=False (ours: the servers only sum),
  calls `pushpull(i, grad, priority=-i)` for each: key 0 goes first;
- src/kvstore/kvstore_dist.h `EncodeDefaultKey`: a key of fewer elements than
  MXNET_KVSTORE_BIGARRAY_BOUND (10^6) goes whole to server (key x 9973) mod servers;
  a larger one is cut into one part per server, part i holding
  round(size / S x (i + 1)) - round(size / S x i) elements;
- src/kvstore/kvstore_dist_server.h `ApplyUpdates`: in sync mode a server answers a
  key's pushpull (the summed value, to every worker) only once every worker has pushed
  that key.

A node runs one worker and, with a server per node, one server (the servers' ranks
fall on the nodes in an order ps-lite's scheduler picks; every node is alike, so only
the set of loads matters). Its link sends what its worker pushes to the other nodes'
servers and what its server answers the other nodes' workers; a push to its own
server stays on the node.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from common import models

# the chapter: a step's computation should exceed its communication by about 20 %
RULE = 1.2


def ring_bytes(p: float, n: int) -> float:
    """Bytes each of n nodes sends a step in a ring all-reduce of p bytes: 2(n-1)/n x p
    (reduce-scatter, then all-gather, each n-1 chunks of p/n)."""
    return 2 * (n - 1) / n * p


def sharded_bytes(p: float, n: int, regather: bool = True,
                  scatter_as_all_reduce: bool = False) -> float:
    """Bytes each of n devices sends a step in sharded data parallelism (ZeRO-3, PyTorch
    FSDP: Rajbhandari et al. 2020) over p bytes of parameters: an all-gather of the
    parameters before the forward pass, another before the backward pass (regather: the
    gathered parameters freed after the forward pass, FSDP2's reshard_after_forward=True),
    and a reduce-scatter of the gradients, each (n-1)/n x p: 3(n-1)/n x p, 1.5 times
    ring_bytes' 2(n-1)/n x p; gathered once and kept through the backward pass
    (common/core/sharded.py), 2(n-1)/n x p (issue 52; a calculation).
    scatter_as_all_reduce: a collective library whose reduce-scatter sends an all-reduce's
    bytes (GLOO_REDUCE_SCATTER_AS_ALL_REDUCE): 4(n-1)/n x p with regather, twice a ring's."""
    scatter = ring_bytes(p, n) if scatter_as_all_reduce else (n - 1) / n * p
    return (2 if regather else 1) * (n - 1) / n * p + scatter


# torch 2.13's gloo (the CPU collectives of PyTorch's FSDP2) sends as many bytes in
# reduce_scatter_tensor as in all_reduce of the same tensor: 1.002 and 1.504 times the
# tensor's bytes per rank on 2 and 4 emulated nodes (all_gather_into_tensor 0.501 and
# 0.752, a ring's (n-1)/n), measured on netns links (docs/results/cpu-2core-vit-splits-
# links.md): it reduces the whole tensor and keeps its part
GLOO_REDUCE_SCATTER_AS_ALL_REDUCE = True


def tensor_parallel_bytes(activation_bytes: float, blocks: int, n: int,
                          backward_all_reduces: int = 2) -> float:
    """Bytes each of n devices sends a step in tensor parallelism (Megatron-LM: Shoeybi et
    al. 2019): per transformer block, two ring all-reduces of the activations forward (after
    the attention's output projection and the MLP's second layer, both row-parallel) and
    two backward (the gradients of the column-parallel layers' inputs: Megatron's fused
    QKV, the MLP's first layer), each of `activation_bytes` (batch x tokens x width x the
    bytes of an element): 4 x blocks x ring_bytes(activation_bytes, n) (issue 52; a
    calculation). backward_all_reduces: where Q, K and V are three column-parallel layers
    that each all-reduce their input's gradient (DTensor's ColwiseParallel on each, as
    PyTorch's tp mode plans them: DTENSOR_BACKWARD_ALL_REDUCES), 4 backward, 6 a block."""
    return (2 + backward_all_reduces) * blocks * ring_bytes(activation_bytes, n)


# PyTorch's tp mode (DTensor): Q, K, V and fc1 each ColwiseParallel, each all-reducing its
# input's gradient in the backward pass (frameworks/pytorch/native.py TPTrainer)
DTENSOR_BACKWARD_ALL_REDUCES = 4


def ring_sec(nbytes: float, k: int, latency: float, bandwidth: float) -> float:
    """A ring all-reduce of nbytes over k devices: 2(k-1) latencies and each device's
    ring_bytes at the link's bandwidth (bytes/s); 0 on one device."""
    if k == 1:
        return 0.0
    return 2 * (k - 1) * latency + ring_bytes(nbytes, k) / bandwidth


def rule_batch(compute: Callable[[int], float], t2: float) -> int | None:
    """The smallest per-device batch (a power of two up to 65536) whose compute time is at
    least RULE x t2 (the communication of a step); None if none is."""
    for b in (2 ** i for i in range(17)):
        if compute(b) >= RULE * t2:
            return b
    return None


# --- compute, links and a step on k devices ---

BACKWARD_SHARE = 2 / 3          # of a training step: the backward pass costs about twice the forward


@dataclass(frozen=True)
class Link:
    name: str
    bandwidth: float            # bytes/s each way per device, as a ring all-reduce uses it
    latency: float              # seconds per ring step
    source: str


# Nominal figures from the vendors' specifications, derated where measured all-reduce
# bus bandwidth is known to fall short of the link rate (NCCL's own tests reach about
# 80-90 % of it on large messages); latency per ring step is the order of a small
# message's one-way time. Each source line says its figures (tests/test_predict.py holds
# them to it). Predictions from them are estimates; a measured
# --allreduce DIR replaces them with this machine's figures.
LINKS = {link.name: link for link in (
    Link("nvlink-h100", 0.8 * 450e9, 5e-6,
         "NVLink 4 on H100 SXM: 900 GB/s per GPU both ways (NVIDIA H100 datasheet), 450 GB/s "
         "each way, x0.8, 5 us per hop"),
    Link("pcie4-x16", 0.8 * 31.5e9, 10e-6,
         "PCIe 4.0 x16: 16 GT/s x 16 lanes x 128/130 = 31.5 GB/s each way (PCI-SIG), x0.8, "
         "10 us per hop"),
    Link("25gbe", 0.9 * 25e9 / 8, 25e-6,
         "25 Gb Ethernet: 3.125 GB/s each way (IEEE 802.3by), x0.9 for TCP/IP, 25 us per hop"),
    Link("ib-100g", 0.9 * 100e9 / 8, 3e-6,
         "100 Gb/s InfiniBand EDR: 12.5 GB/s each way (InfiniBand Trade Association), x0.9, "
         "3 us per hop"),
)}


def allreduce_sec(nbytes: float, k: int, link: Link) -> float:
    """A ring all-reduce of nbytes over k devices on `link` (common/core/perf.py)."""
    return ring_sec(nbytes, k, link.latency, link.bandwidth)


@dataclass
class Compute:
    """One device's step time as a + c x per-device batch, from measured points."""
    points: list[tuple[int, float]]

    def coefficients(self) -> tuple[float, float]:
        b = np.array([p[0] for p in self.points], float)
        t = np.array([p[1] for p in self.points], float)
        if len(set(b)) < 2:              # one batch size: proportional, no fixed cost known
            return 0.0, float(np.mean(t / b))
        c, a = np.polyfit(b, t, 1)
        if a < 0:       # no negative fixed cost: the best line through the origin instead
            return 0.0, float((b @ t) / (b @ b))
        return a, max(c, 0.0)

    def __call__(self, batch: float) -> float:
        a, c = self.coefficients()
        return a + c * batch


@dataclass
class PowerLaw:
    """One device's step time as k x batch^alpha (least squares in log-log), from measured
    points: a law that bends, for engines whose per-image cost moves with the batch."""
    points: list[tuple[int, float]]

    def coefficients(self) -> tuple[float, float]:
        b = np.log([p[0] for p in self.points])
        t = np.log([p[1] for p in self.points])
        if len(set(b)) < 2:              # one batch size: proportional
            return float(np.exp(np.mean(t - b))), 1.0
        alpha, log_k = np.polyfit(b, t, 1)
        return float(np.exp(log_k)), float(alpha)

    def __call__(self, batch: float) -> float:
        k, alpha = self.coefficients()
        return k * batch ** alpha


def predict(compute: Compute, nbytes: int, batch: int, k: int, link: Link, overlap: float,
            turns: Compute | None = None, contention: float = 1.0, per_process: int | None = None
            ) -> dict:
    """One step on k devices. `turns`: the devices of a process (per_process of them, k
    by default) share their cores and threads (one device's step at that thread count),
    so compute is per_process of its steps; else each computes its shard at once on its
    own, `contention` times slower than alone."""
    t1 = ((per_process or k) * turns(batch / k) if turns
          else contention * compute(batch / k))
    t2 = allreduce_sec(nbytes, k, link)
    hidden = min(t2, overlap * BACKWARD_SHARE * t1)
    return {"k": k, "t1": t1, "t2": t2, "step": t1 + t2 - hidden}


def rule_batch_on_link(compute: Compute, nbytes: int, k: int, link: Link) -> int | None:
    """The smallest per-device batch (a power of two up to 65536) at which t1 >= RULE x t2,
    t2 a ring all-reduce of nbytes over k devices on `link`."""
    return rule_batch(compute, allreduce_sec(nbytes, k, link))


# --- MXNet's parameter server (dist_sync KVStore) ---

BIGARRAY_BOUND = 1_000_000       # MXNET_KVSTORE_BIGARRAY_BOUND's default, in elements
FLOAT32 = 4


def key_sizes(model: str) -> list[int]:
    """Elements of each KVStore key, in gluon's key order (the model's KEY_ORDER: its
    trained parameters as frameworks/mxnet's networks register them)."""
    m = models.get(model)
    return [int(np.prod(m.PARAM_SHAPES[i])) for i in m.KEY_ORDER]


def parts(sizes: list[int], servers: int) -> list[tuple[int, int, int]]:
    """(key, server, elements) of every piece the workers push and pull, in key order:
    EncodeDefaultKey's assignment."""
    out = []
    for key, n in enumerate(sizes):
        if n < BIGARRAY_BOUND:
            out.append((key, (key * 9973) % servers, n))
            continue
        for i in range(servers):
            # C's round(): halves away from zero (Python's round() takes them to even)
            cut = [math.floor(n / servers * j + 0.5) for j in (i, i + 1)]
            out.append((key, i, cut[1] - cut[0]))
    return out


def server_bytes(sizes: list[int], servers: int) -> list[int]:
    """The bytes each server holds (and each worker pushes to it, and pulls from it)."""
    held = [0] * servers
    for _, s, n in parts(sizes, servers):
        held[s] += FLOAT32 * n
    return held


# where MXNet's parameter servers run across machines (compare --servers): one on every
# node (as MXNet's own launcher starts them), or one on node 0
SERVER_PLACEMENTS = ("per-node", "one")


def server_count(nodes: int, placement: str) -> int:
    """How many parameter servers a run on `nodes` nodes has, placed `placement` (one of
    SERVER_PLACEMENTS): the rule MXNet's engine starter (common.launch.engines) runs by."""
    return 1 if placement == "one" else nodes


def sent_bytes(sizes: list[int], nodes: int, placement: str) -> list[int]:
    """Each node's bytes sent a step, server s on node s: its worker pushes what the
    other servers hold, its server answers the n - 1 other workers' pulls. With a server
    per node: P + (n - 2) x S_s, S_s the bytes its server holds; one server (node 0):
    (n - 1) x P on node 0, P on each other node."""
    held = server_bytes(sizes, server_count(nodes, placement))
    held += [0] * (nodes - len(held))
    total = sum(held)
    return [(total - s) + (nodes - 1) * s for s in held]


def exchange_bytes(sizes: list[int], nodes: int, placement: str) -> float:
    """How long a step's key-by-key pushpull keeps the links busy, in bytes of one link
    (seconds x the link's bytes per second): every worker pushes its pieces in key order
    at once; a server answers a piece to every other worker once all n pushes of it are
    in; each node's link is shared equally by its connections that have bytes to send
    (TCP flows through one shaped queue), each connection sending its messages in order.
    Never less than the busiest link's bytes (sent_bytes), and more where a large key's
    answers must wait for its pushes (LeNet's dense weight, 79 % of its bytes)."""
    servers = server_count(nodes, placement)
    pieces = parts(sizes, servers)
    # a connection: (sending node, receiving node, 'push' or 'answer') -> queued messages
    queues: dict[tuple, list[list]] = {}
    pushed = {i: 0 for i in range(len(pieces))}         # piece -> pushes arrived

    def answer(i: int) -> None:
        _, s, n = pieces[i]
        for w in range(nodes):
            if w != s:
                queues.setdefault((s, w, "answer"), []).append([FLOAT32 * n, i])

    for w in range(nodes):
        for i, (_, s, n) in enumerate(pieces):
            if s == w:                                   # its own node's server: no link
                pushed[i] += 1
            else:
                queues.setdefault((w, s, "push"), []).append([FLOAT32 * n, i])
    for i in pushed:
        if pushed[i] == nodes:
            answer(i)
    now = 0.0
    while any(queues.values()):
        active = [c for c, q in queues.items() if q]
        share = {c: 1.0 / sum(1 for d in active if d[0] == c[0]) for c in active}
        # the next message to finish at the current shares
        dt = min(queues[c][0][0] / share[c] for c in active)
        now += dt
        done = []
        for c in active:
            queues[c][0][0] -= dt * share[c]
            if queues[c][0][0] <= 1e-9 * max(1, FLOAT32 * max(sizes)):
                done.append((c, queues[c].pop(0)[1]))
        for c, i in done:
            if c[2] == "push":
                pushed[i] += 1
                if pushed[i] == nodes:
                    answer(i)
    return now
