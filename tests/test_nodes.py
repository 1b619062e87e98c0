"""Runs across several machines, simulated on this one (--launcher local: every node
its own processes on localhost), each framework on its own engine: torchrun, Paddle's
launcher, TF_CONFIG workers, MXNet's parameter server (common/launch/nodes.py). Two nodes of
one process each must train as one process does on the full batch; a node that dies
or never joins must end its run as failed, in bounded time."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from common.facts import data, registry
from common import models
from common.launch.launcher import free_port
from tests.conftest import (RUN_SHAPE, ROOT, covered, having, interrupt, lacking, planted_run,
                            subprocess_env)
from tests.test_training import GLOROT_LOSS_ATOL, _agree, _lenet_glorot_config, _ok, _same_params

STEPS = 3      # from Glorot weights: see GLOROT in tests/test_training.py (why 3, not more)
JOIN_TIMEOUT = 60        # seconds; each test's bound on a lost node


_ONE = []


# From Glorot weights, where every parameter's update moves the loss (from the chapter's
# N(0, 0.01^2) weights only the output bias does in the first steps, and a node that
# skipped part of the all-reduce could pass on the losses)
INIT = "glorot"


def _one_process():
    """The NumPy oracle on the full batches of the runs (once): its first STEPS losses
    and the fingerprint of its final parameters."""
    if not _ONE:
        model, ds = models.get("lenet"), data.synthetic(0)
        shape = RUN_SHAPE["lenet"]
        order = data.batch_order(len(ds.X_train), shape["batch_size"], 0, 0)[:STEPS]
        losses, params = models.sgd_steps(model, model.init_params(0, INIT),
                                          [(ds.X_train[i], ds.y_train[i]) for i in order],
                                          shape["lr"], state=model.init_state())
        _ONE.append((losses, models.fingerprint(params)))
    return _ONE[0]


def _two_nodes(worker_record, framework):
    return worker_record(framework, "native", 1, steps=STEPS, nodes=2, launcher="local",
                         join_timeout=JOIN_TIMEOUT, init=INIT)


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
    assert two["cluster_launcher"] and two["launcher"] == "local"
    assert two["servers"] == (2 if registry.facts(framework).cluster == "dmlc" else None)
    # the gradients (and losses) of both nodes' shards were summed: else the second
    # step's loss would be that of half a batch's update, and the parameters others
    losses, fingerprint = _one_process()
    _agree(two["step_losses"], losses, "lenet", "(2 nodes vs 1 process, the oracle)",
           GLOROT_LOSS_ATOL[:STEPS])
    _same_params(two["param_fingerprint"], fingerprint, "2 nodes vs 1 process, the oracle")
    assert two["test_accuracy"] is not None


def _rank_processes(node: int) -> list[int]:
    """PIDs of the training processes (common/launch/rank.py workers) of a simulated node."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
            env = (proc / "environ").read_bytes().split(b"\0")
        except (OSError, PermissionError):
            continue
        if (any(c.endswith(b"common/launch/rank.py") for c in cmd) and b"worker" in cmd
                and f"DL_COMPARE_NODE={node}".encode() in env):
            pids.append(int(proc.name))
    return pids


def _compare(out: Path, *args) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "benchmarks.compare", "--dataset", "synthetic",
                             "--epochs", "20", "--eval-samples", "64", "--no-plots", "--out",
                             str(out), "--join-timeout", str(JOIN_TIMEOUT),
                             "--peak-gemm-size", "0", *args],
                            cwd=ROOT, env=subprocess_env(2), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


# one framework per way a dead rank is noticed: a child of torchrun's agent, of
# Paddle's launcher, and a process of ours (MXNet's worker beside its parameter server)
@pytest.mark.parametrize("framework", [f for f in ("pytorch", "paddle", "mxnet") if f in covered()])
def test_a_killed_node_fails_the_run_in_bounded_time(tmp_path, framework):
    proc = _compare(tmp_path, "--framework", framework, "--nodes", "2", "--launcher", "local")
    deadline = time.monotonic() + 240
    while not _rank_processes(1):
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()[-2000:]
        time.sleep(0.5)
    time.sleep(3)                          # let it start, join and train
    for pid in _rank_processes(1):
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
    assert not _rank_processes(0) and not _rank_processes(1), "rank processes left running"


def test_a_node_that_never_joins_fails_after_the_join_timeout(tmp_path):
    framework = covered()[0]
    started = time.monotonic()
    proc = _compare(tmp_path, "--framework", framework, "--nodes", "2", "--node-rank", "0",
                    "--master", f"127.0.0.1:{free_port()}", "--node-hosts", "127.0.0.1,127.0.0.1",
                    "--join-timeout", "8")
    code = proc.wait(timeout=180)
    record = json.loads((tmp_path / f"{framework}-native-2nodes-1dev.json").read_text())
    assert code == 1 and record["status"] == "failed"
    assert "did not join the run within 8 s" in record["error"], record["error"]
    assert time.monotonic() - started < 90
    assert not _rank_processes(0)


def test_ctrl_c_stops_every_process_of_every_node(tmp_path):
    """torchrun and Paddle's launcher start their ranks in sessions of their own: the
    ranks must still end with the run (common/launch/rank.py ties them to their parent)."""
    framework = covered()[0]
    interrupt(["-m", "benchmarks.compare", "--framework", framework, "--nodes", "2", "--launcher",
               "local", "--dataset", "synthetic", "--epochs", "20", "--no-plots",
               "--peak-gemm-size", "0", "--out", str(tmp_path)], tmp_path,
              ready=lambda: _rank_processes(1), settle=3)
    time.sleep(2)
    assert not _rank_processes(0) and not _rank_processes(1), "rank processes outlived the run"


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
        "pytorch", "native", 1, steps_per_epoch=STEPS, nodes=2, launcher="local",
        join_timeout=JOIN_TIMEOUT)))
    losses, fingerprint = _one_process()
    with pytest.raises(AssertionError, match="parameters differ"):
        _same_params(planted["param_fingerprint"], fingerprint, "planted")
