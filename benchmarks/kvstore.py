"""MXNet 1.9's dist_sync KVStore as arithmetic: which server holds which key, the bytes
each node's link sends a step, and how long the key-by-key exchange keeps the links
busy. Calculations from MXNet's source and the model's parameter shapes, no MXNet
imported (the links page runs where MXNet is not installed).

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
server stays on the node."""
from __future__ import annotations

import math

import numpy as np

from common import models

BIGARRAY_BOUND = 1_000_000       # MXNET_KVSTORE_BIGARRAY_BOUND's default, in elements
FLOAT32 = 4


def key_sizes(model: str) -> list[int]:
    """Elements of each KVStore key, in gluon's key order (the trained parameters as
    frameworks/mxnet/native.py's networks register them)."""
    m = models.get(model)
    sizes = [int(np.prod(s)) for s in m.PARAM_SHAPES]
    if not hasattr(m, "BLOCKS"):
        return sizes                      # LeNet: registered in the common order
    # ResNet-18: each Residual block registers conv1, conv2, its shortcut conv, then bn1
    # and bn2 (the attributes' order in its __init__); the common order puts each bn
    # after its conv
    order = [*m.STEM["conv"].values(), m.STEM["bn"]["gamma"], m.STEM["bn"]["beta"]]
    for b in m.BLOCKS:
        for conv in (b["conv1"], b["conv2"], b["shortcut"]):
            if conv:
                order += [conv["weight"], conv["bias"]]
        order += [b["bn1"]["gamma"], b["bn1"]["beta"], b["bn2"]["gamma"], b["bn2"]["beta"]]
    order += [m.FC["weight"], m.FC["bias"]]
    assert sorted(order) == list(range(len(sizes))), "every parameter once"
    return [sizes[i] for i in order]


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


def _servers(nodes: int, placement: str) -> int:
    return 1 if placement == "one" else nodes


def sent_bytes(sizes: list[int], nodes: int, placement: str) -> list[int]:
    """Each node's bytes sent a step, server s on node s: its worker pushes what the
    other servers hold, its server answers the n - 1 other workers' pulls. With a server
    per node: P + (n - 2) x S_s, S_s the bytes its server holds; one server (node 0):
    (n - 1) x P on node 0, P on each other node."""
    held = server_bytes(sizes, _servers(nodes, placement))
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
    servers = _servers(nodes, placement)
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
