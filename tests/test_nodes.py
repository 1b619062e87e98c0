"""Runs across several machines, emulated on this one (--network netns: every node in a
network namespace of its own, its own address, the nodes joined by shaped links; where
this machine cannot, --network loopback: every node its own processes on localhost), each
framework on its own engine: torchrun, Paddle's launcher, TF_CONFIG workers,
jax.distributed, MXNet's parameter server (common/launch/nodes.py). Two nodes of one
process each must train as one process does on the full batch, their traffic crossing
the links; a node that dies or never joins must end its run as failed, in bounded time."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from common.facts import registry
from common import models
from common.launch import netns
from common.launch.launcher import free_port
from tests.helpers.conformance import placement_is
# run in this file's worker (see its docstring)
from tests.helpers.link_faults import _ours
from tests.helpers.link_faults import (  # noqa: F401
    test_a_cut_and_a_throttled_link_end_their_runs_in_bound_naming_the_link,
    test_the_links_state_names_a_link_down_and_one_throttled)
from tests.conftest import (RUN_SHAPE, ROOT, covered, having, interrupt, lacking, planted_run,
                            subprocess_env)
from common.core.modes import MODES
from tests.test_training import (GLOROT, GLOROT_LOSS_ATOL, _agree, _glorot_oracle,
                                 _lenet_glorot_config, _ok, _same_params, _same_update,
                                 _tp_holds)

STEPS = GLOROT["steps"]   # from Glorot weights: see GLOROT in tests/test_training.py (why 3)
JOIN_TIMEOUT = 60        # seconds; each test's bound on a lost node


# From Glorot weights, where every parameter's update moves the loss (from the chapter's
# N(0, 0.01^2) weights only the output bias does in the first steps, and a node that
# skipped part of the all-reduce could pass on the losses)
INIT = GLOROT["init"]


def _one_process():
    """The NumPy oracle on the full batches of the runs (tests/test_training.py's, computed
    once): its first STEPS losses and the fingerprint of its final parameters."""
    oracle = _glorot_oracle()
    return oracle["losses"], models.fingerprint(oracle["tensors"])


# the nodes' own addresses and links where this machine can make them (root, ip, tc):
# what real machines need of every engine (its own address, not the hostname's) is then
# checked too; the rate is one that LeNet's few steps do not wait on
EMULATED = netns.unavailable() is None
NODES = {"network": "netns", "link": "1gbit"} if EMULATED else {"network": "loopback"}
NEEDS_NETNS = pytest.mark.skipif(not EMULATED, reason=netns.unavailable() or "")


def _two_nodes(worker_record, framework):
    return worker_record(framework, "native", 1, steps=STEPS, nodes=2, join_timeout=JOIN_TIMEOUT,
                         init=INIT, **NODES)


@pytest.mark.parametrize("framework", lacking("nodes"))
def test_a_listed_gap_is_recorded_not_applicable(worker_record, framework):
    record = _two_nodes(worker_record, framework)
    assert record["status"] == "not-applicable" and record["error"] == registry.gap(framework, "nodes")


@pytest.mark.parametrize("framework", having("nodes"))
def test_two_simulated_nodes_train_as_one_process(worker_record, framework):
    """Against the NumPy oracle of one process on the full batch, from Glorot weights:
    the step losses and the final parameters (rank 0's fingerprint)."""
    two = _ok(_two_nodes(worker_record, framework))
    assert (two["nodes"], two["world_size"], two["devices"]) == (2, 2, 1)
    assert len(two["node_sec_per_epoch"]) == 2 and all(two["node_sec_per_epoch"])
    assert two["engine_starter"] and two["network"] == NODES["network"]
    if EMULATED:       # each node its own address; its link carried its share (status ok)
        assert two["link"]["addresses"] == ["10.77.0.1", "10.77.0.2"]
        assert two["link"]["rate"] == "1gbit" and two["link"]["short"] is None
        assert all(two["link"]["tx_bytes"]) and all(two["link"]["rx_bytes"])
    assert two["servers"] == (2 if registry.facts(framework).engine_starter == "dmlc" else None)
    if registry.facts(framework).engine_starter in OWN_REPLICA_COUNT or two["placement"] is not None:
        _spans_the_nodes(two)
    _as_one_process(two)
    assert two["test_accuracy"] is not None


# The engines where what a node trains on follows the engine's own count of devices, not
# the launcher's rank: a node whose engine holds its own devices alone would take the whole
# batch and train alone, as one process does (jax.distributed's mesh, before each process
# fed its own rows; TF_CONFIG's MultiWorkerMirroredStrategy cuts the batch by its replica
# count). The record says which devices and processes the step spans (Trainer.placement).
# The others take their rows by the rank that the launcher or the engine hands them
# (torchrun's, Paddle's; MXNet's KVStore numbers its workers, and the record's world_size
# is that count): a node that trains alone trains on its rows, and the numbers fail.
OWN_REPLICA_COUNT = ("jax-distributed", "tf-config")


def _spans_the_nodes(two):
    """The step's program spans both nodes' devices in two processes, each device holding
    its share of the batch (a node whose mesh held its own devices alone trains alone)."""
    placement_is(two["placement"], models.get("lenet"), 2, 2, 1,
                 RUN_SHAPE["lenet"]["batch_size"], "2 nodes")


def _as_one_process(two):
    """The gradients (and losses) of both nodes' shards were summed: else the second step's
    loss would be that of half a batch's update, and the parameters others (every rank
    takes only its own rows of a batch, so a node that trains alone trains on those)."""
    losses, fingerprint = _one_process()
    _agree(two["step_losses"], losses, "lenet", "(2 nodes vs 1 process, the oracle)",
           GLOROT_LOSS_ATOL[:STEPS])
    _same_params(two["param_fingerprint"], fingerprint, "2 nodes vs 1 process, the oracle")
    _same_update(two, _glorot_oracle(), "lenet", "2 nodes vs 1 process, the oracle")


# The frameworks whose own tensor parallelism spans machines (a process per device: its
# engine starter starts them as native mode's)
TP_ACROSS = [f for f in covered() if MODES["tp"].across_nodes(f) is None]


@pytest.mark.parametrize("framework", TP_ACROSS)
def test_tensor_parallelism_across_two_nodes_is_one_device(worker_record, framework):
    """The tiny ViT cut over 2 emulated nodes by the framework's own tensor parallelism,
    a process on each, from Glorot weights: as one device on the whole batch (native x1,
    the oracle's update), each node holding its half of the split weights; the link
    carried the activations' all-reduces (far more than the parameters' bytes: DDP's
    replicas in tp's place would move only the gradients, tests/test_training.py)."""
    two = _ok(worker_record(framework, "tp", 1, "vit_tiny", nodes=2, join_timeout=JOIN_TIMEOUT,
                            **GLOROT, **NODES))
    assert (two["nodes"], two["world_size"], two["engine_starter"] is not None) == (2, 2, True)
    _tp_holds(worker_record, framework, two)
    if EMULATED:
        sent = [b / two["link"]["timed_steps"] for b in two["link"]["tx_bytes"]]
        assert min(sent) > 2 * models.param_bytes("vit_tiny"), sent


# The environment variable that tags a test's own run: its ranks inherit it, so a check for
# ranks left running (or a kill) sees only that run's, not the ranks of a run of several
# nodes that the other pytest process has going at the time (seen: a fresh-clone CI where
# both checks below found such a rank, node 0's, alive at their end)
RUN_TAG = "DL_COMPARE_TEST_RUN"


def _rank_processes(node: int, run: Path) -> list[int]:
    """PIDs of the training processes (common/launch/rank.py workers) of a simulated node
    of the run tagged `run` (_tagged)."""
    tag = f"{RUN_TAG}={run}".encode()
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
            env = (proc / "environ").read_bytes().split(b"\0")
        except (OSError, PermissionError):
            continue
        # a Slurm job's are tests/test_slurm.py's (in the other pytest worker), not ours
        if (any(c.endswith(b"common/launch/rank.py") for c in cmd) and b"worker" in cmd
                and f"DL_COMPARE_NODE={node}".encode() in env and tag in env
                and not any(e.startswith(b"SLURM_JOB_ID=") for e in env)):
            pids.append(int(proc.name))
    return pids


def _compare(out: Path, *args) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "benchmarks.compare", "--dataset", "synthetic",
                             "--epochs", "20", "--eval-samples", "64", "--no-plots", "--out",
                             str(out), "--join-timeout", str(JOIN_TIMEOUT),
                             "--peak-gemm-size", "0", *args],
                            cwd=ROOT, env=_tagged(subprocess_env(2), out), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _tagged(env: dict, run: Path) -> dict:
    return {**env, RUN_TAG: str(run)}


# one framework per way a dead rank is noticed: a child of torchrun's agent, of
# Paddle's launcher, and a process of ours (MXNet's worker beside its parameter server)
@pytest.mark.parametrize("framework", [f for f in ("pytorch", "paddle", "mxnet") if f in covered()])
def test_a_killed_node_fails_the_run_in_bounded_time(tmp_path, framework):
    proc = _compare(tmp_path, "--framework", framework, "--nodes", "2", *_options(NODES))
    deadline = time.monotonic() + 240
    while not _rank_processes(1, tmp_path):
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()[-2000:]
        time.sleep(0.5)
    time.sleep(3)                          # let it start, join and train
    links = _its_namespaces()
    for pid in _rank_processes(1, tmp_path):
        os.kill(pid, signal.SIGKILL)
    killed = time.monotonic()
    try:
        code = proc.wait(timeout=JOIN_TIMEOUT + 30)
    finally:
        proc.kill()
    record = json.loads((tmp_path / f"{framework}-native-2nodes-1dev.json").read_text())
    assert code == 1 and record["status"] == "failed", record["error"]
    assert "node" in record["error"], record["error"]
    assert time.monotonic() - killed < JOIN_TIMEOUT + 30
    assert not _rank_processes(0, tmp_path) and not _rank_processes(1, tmp_path), "rank processes left running"
    assert bool(links) == EMULATED and not set(links) & set(netns._namespaces()), links


def _options(fields: dict) -> list[str]:
    return [a for k, v in fields.items() for a in (f"--{k}", v)]


def _its_namespaces() -> list[str]:
    """The emulated network of the one run under way (with its nodes' ranks running): the
    namespaces this test's processes own (a test in the other pytest worker may have its
    own at the same time)."""
    return [ns for ns in netns._namespaces() if _ours(ns, os.getpid())] if EMULATED else []


def test_a_node_that_never_joins_fails_after_the_join_timeout(tmp_path):
    framework = covered()[0]
    started = time.monotonic()
    proc = _compare(tmp_path, "--framework", framework, "--nodes", "2", "--node-rank", "0",
                    "--master", f"127.0.0.1:{free_port()}", "--node-hosts", "127.0.0.1,127.0.0.1",
                    "--join-timeout", "8")
    code = proc.wait(timeout=180)
    record = json.loads((tmp_path / f"{framework}-native-2nodes-1dev.json").read_text())
    assert code == 1 and record["status"] == "failed"
    # the stage it stopped at, and the engine's own output in the run's log
    assert "never joined the run within 8 s" in record["error"], record["error"]
    assert "--- node0-worker0.log ---" in next((tmp_path / "logs").glob("*.log")).read_text()
    assert time.monotonic() - started < 90
    assert not _rank_processes(0, tmp_path)


def test_ctrl_c_stops_every_process_of_every_node(tmp_path):
    """torchrun and Paddle's launcher start their ranks in sessions of their own: the
    ranks must still end with the run (common/launch/rank.py ties them to their parent)."""
    framework = covered()[0]
    links = []
    interrupt(["-m", "benchmarks.compare", "--framework", framework, "--nodes", "2",
               *_options(NODES), "--dataset", "synthetic", "--epochs", "20", "--no-plots",
               "--peak-gemm-size", "0", "--out", str(tmp_path)], tmp_path,
              ready=lambda: _rank_processes(1, tmp_path) and not links.extend(_its_namespaces()), settle=3,
              env=_tagged(subprocess_env(), tmp_path))
    time.sleep(2)
    assert not _rank_processes(0, tmp_path) and not _rank_processes(1, tmp_path), "rank processes outlived the run"
    # the worker was killed with its session: compare removed its emulated network
    assert bool(links) == EMULATED and not set(links) & set(netns._namespaces()), links


# A rank whose launcher is gone before the rank has tied itself to it (d755289: a Ctrl-C'd
# run's launcher ended while its ranks were still importing, and they trained on). This
# process forks the rank and exits; the fork execs the rank only once it is orphaned, so
# the parent is gone before the rank runs a line, every time (no race left to chance).
# It prints the rank's pid; the rank's output goes to the test's pipes. (Orphans go to pid
# 1 here; under a subreaper, pid 1 for orphans no longer holds, and the guard's
# `parent == 1` cannot see a parent gone before the rank started: this test then fails.)
ORPHAN = """
import os, sys, time
parent = os.getpid()
rank = os.fork()
if rank == 0:
    while os.getppid() == parent:
        time.sleep(0.001)
    os.environ["DL_COMPARE_TEST_PARENT"] = str(parent)
    os.execv(sys.executable, [sys.executable, *sys.argv[1:]])
print(rank)
"""

# The race's other half: the parent alive when the rank reads its pid, gone when
# PR_SET_PDEATHSIG is set. The rank's first os.getppid() answers the parent it had (a
# sitecustomize module in the rank alone), the later ones the truth.
PARENT_READ_ALIVE = """
import os
if "DL_COMPARE_TEST_PARENT" in os.environ:
    _getppid, _first = os.getppid, [int(os.environ["DL_COMPARE_TEST_PARENT"])]
    os.getppid = lambda: _first.pop() if _first else _getppid()
"""

# The guard weakened, as source edits of rank.py (each must apply): the orphan check
# without one half, or the guard as it was before d755289 (PR_SET_PDEATHSIG alone, after
# the imports, which a parent gone already never fires)
GUARD = "    if parent == 1 or os.getppid() != parent:     # orphaned before the signal was set\n"
EARLY = 'if __name__ == "__main__":\n    die_with_parent()\n'
MAIN = "def main(argv: list[str]) -> int:\n"
WEAKENED = {
    "no parent == 1": [(GUARD, GUARD.replace("parent == 1 or ", ""))],
    "no second os.getppid()": [(GUARD, GUARD.replace(" or os.getppid() != parent", ""))],
    "before d755289": [(GUARD, "    if False:\n"), (EARLY, ""),
                       (MAIN, MAIN + "    die_with_parent()\n")],
}


def _orphaned_rank(folder: Path, script: Path, parent_read_alive: bool) -> tuple:
    """(the process that started it, the pid of the rank) of a rank (`script`, a worker with
    a real configuration) started under a parent that is already gone."""
    (folder / "site").mkdir()
    if parent_read_alive:
        (folder / "site" / "sitecustomize.py").write_text(PARENT_READ_ALIVE)
    cfg = {"framework": registry.NAMES[0], "mode": "native", "devices": 1, "dataset": "synthetic",
           "epochs": 1, "steps_per_epoch": 1}
    (folder / "out").mkdir()
    proc = subprocess.Popen([sys.executable, "-c", ORPHAN, str(script), json.dumps(cfg),
                             str(folder / "out"), "worker"], cwd=ROOT, text=True,
                            env=subprocess_env(extra_path=str(folder / "site")),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return proc, int(proc.stdout.readline())


def _ran_past_its_guard(folder: Path, proc: subprocess.Popen, rank: int) -> str:
    """What the orphaned rank did past its guard ("" for nothing): its output and the files
    it wrote, once it has ended (its pipes closed and its process gone; 120 s at most)."""
    try:
        out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.kill(rank, signal.SIGKILL)
        raise
    deadline = time.monotonic() + 10         # the pipes close as it exits; then it is reaped
    while _alive(rank) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(rank), f"the rank {rank} closed its output but lives on"
    return (out + err + " ".join(p.name for p in (folder / "out").iterdir())).strip()


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(") ")[2][0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG is Linux's")
def test_a_rank_whose_launcher_is_already_gone_ends_before_it_trains(tmp_path):
    """The rank, started with its parent gone (read as gone, or read alive and gone when
    the signal is set), ends at once: no line of it past the guard, no file. Planted: the
    guard without either half of its orphan check, and the guard before d755289, each go
    on past it (to the rank's first error here: it has no launcher's rank)."""
    script = ROOT / "common" / "launch" / "rank.py"
    cases = [("as is", False), ("as is", True), ("no parent == 1", False),
             ("no second os.getppid()", True), ("before d755289", False)]
    runs, procs = {}, {}
    for i, (name, alive) in enumerate(cases):     # all at once: each a Python start-up
        runs[name, alive] = folder = tmp_path / f"run{i}"
        folder.mkdir()
        rank = script
        if name != "as is":
            source = script.read_text()
            for old, new in WEAKENED[name]:
                assert source.count(old) == 1, f"the plant {name!r} no longer applies: {old!r}"
                source = source.replace(old, new)
            rank = folder / "rank.py"
            rank.write_text(source)
        procs[name, alive] = _orphaned_rank(folder, rank, alive)
    did = {key: _ran_past_its_guard(runs[key], *started) for key, started in procs.items()}
    for key, what in did.items():
        if key[0] == "as is":
            assert what == "", f"a rank orphaned ({key}) went on past its guard: {what[-2000:]}"
        else:
            assert "not started by a launcher" in what, f"planted {key}: {what[-2000:]}"


# A planted bug, in every process of the run (a sitecustomize module on the path): node
# 1's rank hands the all-reduce zeros instead of its gradient (a DDP communication hook).
NODE_1_SENDS_ZEROS = """
import os
if os.environ.get("RANK") == "1" and os.environ.get("TORCHELASTIC_RUN_ID"):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    _init = DDP.__init__

    def _zeros(state, bucket):
        grads = bucket.buffer()
        grads.zero_()
        return dist.all_reduce(grads, async_op=True).get_future().then(lambda f: f.value()[0])

    def __init__(self, *args, **kwargs):
        _init(self, *args, **kwargs)
        self.register_comm_hook(None, _zeros)
    DDP.__init__ = __init__
"""


def test_the_nodes_check_fails_when_a_node_skips_its_share_of_the_all_reduce(tmp_path):
    """The check above, with node 1 (torchrun, DDP) sending zeros into the all-reduce:
    its parameters must fail it."""
    if "pytorch" not in covered():
        pytest.skip("needs pytorch")
    planted = _ok(planted_run(tmp_path, NODE_1_SENDS_ZEROS, _lenet_glorot_config(
        "pytorch", "native", 1, steps_per_epoch=STEPS, nodes=2, join_timeout=JOIN_TIMEOUT,
        **NODES)))
    losses, fingerprint = _one_process()
    with pytest.raises(AssertionError, match="parameters differ"):
        _same_params(planted["param_fingerprint"], fingerprint, "planted")


# A planted bug: every node's DDP all-reduces the first half of its gradients with the
# other node and hands the second half to a peer on its own loopback (an echo server in
# the same process), so the run trains, talks, and half of what it should crosses its link.
HALF_OVER_LOOPBACK = """
import os
if os.environ.get("TORCHELASTIC_RUN_ID"):
    import socket, threading
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    server = socket.create_server(("127.0.0.1", 0))

    def _echo():
        conn, _ = server.accept()
        while data := conn.recv(1 << 16):
            conn.sendall(data)
    threading.Thread(target=_echo, daemon=True).start()
    peer = socket.create_connection(server.getsockname())
    _init = DDP.__init__

    def _half_over_loopback(state, bucket):
        grads = bucket.buffer()
        half = grads.numel() // 2
        dist.all_reduce(grads[:half])                 # across the link
        raw = grads[half:].numpy().tobytes()          # over the loopback
        peer.sendall(raw)
        back = bytearray()
        while len(back) < len(raw):
            back += peer.recv(len(raw) - len(back))
        fut = torch.futures.Future()
        fut.set_result(grads)
        return fut

    def __init__(self, *args, **kwargs):
        _init(self, *args, **kwargs)
        self.register_comm_hook(None, _half_over_loopback)
    DDP.__init__ = __init__
"""


@NEEDS_NETNS
def test_the_link_check_fails_when_half_the_gradients_go_over_the_nodes_loopback(
        tmp_path, monkeypatch):
    """The byte check of an emulated run (common/launch/netns.carried): the engine
    exchanges the gradients' bytes each step, but half of them over each node's loopback.
    Its links carry half of 2(n-1) x P a step, which the byte check's bound halved (the
    former one) passes."""
    if "pytorch" not in covered():
        pytest.skip("needs pytorch")
    planted = planted_run(tmp_path, HALF_OVER_LOOPBACK, _lenet_glorot_config(
        "pytorch", "native", 1, steps_per_epoch=STEPS, nodes=2, join_timeout=JOIN_TIMEOUT,
        **NODES))
    assert planted["status"] == "failed", planted.get("error")
    assert "the traffic did not cross the link" in planted["error"]
    link = planted["link"]
    full = 2 * (2 - 1) * link["gradient_bytes"] * link["timed_steps"]
    assert 0.45 < sum(link["tx_bytes"]) / full < 0.6, (link, full)     # half, headers on top
    monkeypatch.setattr(netns, "LEAST_SHARE", netns.LEAST_SHARE / 2)
    counted = [{"tx": tx, "rx": rx} for tx, rx in zip(link["tx_bytes"], link["rx_bytes"])]
    assert netns.carried(counted, 2, models.get("lenet"), link["timed_steps"])["short"] is None


# Planted bugs, in every process of a run, by engine: each node trains alone, its engine
# holding its own devices only. jax.distributed: each node's mesh of its own devices
# (jax.devices() answering jax.local_devices()); TF_CONFIG: each worker's trainer on a
# MirroredStrategy of its own devices instead of the cluster's.
ALONE = {"jax-distributed": """
import os
if os.environ.get("DL_COMPARE_NODE"):
    import jax
    jax.devices = jax.local_devices
""", "tf-config": """
import os
if os.environ.get("DL_COMPARE_NODE"):
    from frameworks.tensorflow import native
    _init = native.MirroredTrainer.__init__
    def __init__(self, ops, params, state, devices, lr, execution="graph", strategy=None):
        _init(self, ops, params, state, devices, lr, execution)
    native.MirroredTrainer.__init__ = __init__
"""}
# one framework per engine (Keras on TensorFlow's placement is held to the same check by the
# two-node test above)
ALONE_RUNS = [next(f for f in having("nodes") if registry.facts(f).engine_starter == c)
              for c in ALONE if any(registry.facts(f).engine_starter == c for f in having("nodes"))]


@pytest.mark.parametrize("framework", ALONE_RUNS)
def test_the_nodes_check_fails_when_each_node_trains_alone(tmp_path, framework):
    """The check above on a run whose every node trains alone, under --network loopback,
    where no link counts the bytes that cross: the placement fails it (1 device in 1
    process). TensorFlow's numbers pass (each worker trains on the whole batch, as one
    process does); JAX's step losses fail too (each process feeds its own rows only)."""
    starter = registry.facts(framework).engine_starter
    planted = _ok(planted_run(tmp_path, ALONE[starter], _lenet_glorot_config(
        framework, "native", 1, steps_per_epoch=STEPS, nodes=2, join_timeout=JOIN_TIMEOUT,
        network="loopback")))
    with pytest.raises(AssertionError, match=r"spans 1 devices in 1 process\(es\), not 2 in 2"):
        _spans_the_nodes(planted)
    if starter == "jax-distributed":
        with pytest.raises(AssertionError, match="step losses differ"):
            _as_one_process(planted)


def _compressed(worker_record):
    return worker_record("pytorch", "native", 1, steps=STEPS, nodes=2, join_timeout=JOIN_TIMEOUT,
                         init=INIT, settings=("fp16-compress",), **NODES)


def _sent(record) -> float:
    """Bytes the nodes sent over their links per timed step."""
    return sum(record["link"]["tx_bytes"]) / record["link"]["timed_steps"]


@NEEDS_NETNS
@pytest.mark.skipif("pytorch" not in covered(), reason="pytorch is not installed")
def test_a_compressed_exchange_carries_half_through_a_run(worker_record, tmp_path):
    """fp16-compress reaches the run and its link: the record's byte check expects half
    the gradients' bytes (wire_share 0.5) and passes, and the links carried 0.4-0.65 of
    what the same run without it carried (issue 53: the compressed byte check was only
    called with the share, never through a run). Planted: DDP's comm hook never
    registered, the full bytes on a run that says it compressed."""
    plain, half = _ok(_two_nodes(worker_record, "pytorch")), _ok(_compressed(worker_record))
    assert half["link"]["wire_share"] == 0.5 and half["link"]["short"] is None
    assert 0.4 <= _sent(half) / _sent(plain) <= 0.65, (_sent(half), _sent(plain))
    print(f"compressed / plain bytes a step: {_sent(half) / _sent(plain):.3f}")
    planted = planted_run(tmp_path, (
        "import torch.nn.parallel as p\n"
        "p.DistributedDataParallel.register_comm_hook = lambda self, state, hook: None\n"),
        {**RUN_SHAPE["lenet"], "framework": "pytorch", "mode": "native", "devices": 1,
         "dataset": "synthetic", "epochs": 1, "steps_per_epoch": STEPS, "nodes": 2,
         "join_timeout": JOIN_TIMEOUT, "init": INIT, "settings": ["fp16-compress"], **NODES})
    assert planted["settings"] == ["fp16-compress"] and _sent(planted) / _sent(plain) > 0.8
    print(f"planted / plain bytes a step: {_sent(planted) / _sent(plain):.3f}")
