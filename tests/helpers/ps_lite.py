"""What MXNet's parameter-server engine did in a run across nodes, in ps-lite's own words:
every scheduler and server process of the run writes ps-lite's log (PS_VERBOSE: 1 the
nodes the scheduler connected, 2 every message a server sent and received) to a file of
the test's, one per process, named by its role, node and pid. From those: the servers
that started and that the scheduler connected, and the pieces of the gradients every
server received (each push's value bytes), against what the run's record says.

A sitecustomize module on the path does it (tests/conftest.py's planted_run), in front of
any plant of the test's."""
from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from common.core import perf
from tests.conftest import RUN_SHAPE, planted_run

OBSERVE = """
import os
_role = os.environ.get("DMLC_ROLE")
if _role in ("server", "scheduler"):
    os.environ["PS_VERBOSE"] = "2" if _role == "server" else "1"
    _log = os.open(os.path.join({seen!r}, f"{{_role}}-node{{os.environ.get('DL_COMPARE_NODE')}}-"
                                f"{{os.getpid()}}.log"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(_log, 2)           # ps-lite logs to stderr (a node's log is removed with the run)
"""
CONNECTED = re.compile(r"the scheduler is connected to (\d+) workers and (\d+) servers")
# a push a server received: "SENDER => ITS_ID. Meta: request=1, ... push=1, ... Body:
# data_size=KEYS data_size=VALUES data_size=LENS"
PUSH = re.compile(r"\d+ => \d+\. Meta: request=1, .*push=1, .*Body: data_size=\d+ data_size=(\d+)")


def run(tmp_path: Path, servers: str = "per-node", settings: tuple = (), plant: str = "") -> tuple:
    """(record, folder of the ps-lite logs) of a 2-node LeNet run of MXNet (loopback, 2
    steps), with `plant` in every process of it."""
    seen = tmp_path / "ps-lite"
    seen.mkdir(parents=True)
    cfg = {"framework": "mxnet", "mode": "native", "devices": 1, "dataset": "synthetic",
           "epochs": 1, **RUN_SHAPE["lenet"], "steps_per_epoch": 2, "eval_samples": 64,
           "nodes": 2, "network": "loopback", "join_timeout": 60, "servers": servers,
           "settings": list(settings)}
    record = planted_run(tmp_path, OBSERVE.format(seen=str(seen)) + plant, cfg)
    assert record["status"] == "ok", record.get("error")
    return record, seen


def servers_seen(record: dict, seen: Path) -> list[int]:
    """The nodes of the server processes the run started, held to the scheduler's count of
    the servers that connected and to the record's `servers`."""
    started = sorted(int(p.name.split("-")[1][4:]) for p in seen.glob("server-*.log"))
    (scheduler,) = seen.glob("scheduler-*.log")
    connected = CONNECTED.search(scheduler.read_text())
    assert connected, f"the scheduler's log names no connected nodes: {scheduler.read_text()[-2000:]}"
    workers, servers = map(int, connected.groups())
    assert workers == record["nodes"], (workers, record["nodes"])
    assert len(started) == servers == record["servers"], (
        f"{len(started)} server processes started (nodes {started}), the scheduler connected "
        f"{servers}, the record says {record['servers']}")
    return started


def pushed(seen: Path) -> list[Counter]:
    """Each server's pushes received: {value bytes: how many}, one Counter per server."""
    return [Counter(int(b) for b in PUSH.findall(p.read_text()))
            for p in sorted(seen.glob("server-*.log"))]


def big_key_bytes(model: str = "lenet") -> int:
    """The bytes of the model's largest KVStore key (LeNet's dense weight, 102,400 floats)."""
    return perf.FLOAT32 * max(perf.key_sizes(model))
