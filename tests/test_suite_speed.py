"""What keeps the suite fast does not change what it checks. The tests' worker server
(tests/helpers/worker_server.py) gives the record a process of its own gives: a run served after
another run equals the same run started alone, step loss by step loss and parameter by
parameter, and one that a previous run's process-wide state reached does not (planted: a
run with torch.autocast's process-wide setting served first, the reason conftest.served
keeps settings out)."""
import json

import pytest

from common.facts import registry
from tests.conftest import RUN_SHAPE, THREADS, WorkerServer, run_python

RUN = {"framework": "pytorch", "mode": "native", "devices": 1, "model": "lenet",
       "dataset": "synthetic", "epochs": 1, "threads": THREADS, **RUN_SHAPE["lenet"],
       "steps_per_epoch": 3, "init": "glorot"}
BEFORE = {**RUN, "mode": "scratch", "devices": 2}


def _served(tmp_path, first: dict) -> dict:
    tmp_path.mkdir()
    server = WorkerServer(tmp_path)
    try:
        for name, cfg in (("first", first), ("run", RUN)):
            why = server.run("pytorch", cfg, tmp_path / f"{name}.json")
            assert why is None, why
    finally:
        server.close()
    return json.loads((tmp_path / "run.json").read_text())


def _alone(tmp_path) -> dict:
    out = tmp_path / "alone.json"
    proc = run_python(["-m", "benchmarks.workers.run", json.dumps(RUN), str(out)],
                      framework="pytorch")
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(out.read_text())


def _same(a: dict, b: dict) -> bool:
    return (a["status"] == b["status"] == "ok" and a["step_losses"] == b["step_losses"]
            and a["param_fingerprint"] == b["param_fingerprint"])


@pytest.mark.skipif(not registry.is_installed("pytorch"), reason="needs pytorch")
def test_a_served_run_equals_the_run_alone_and_a_leak_would_show(tmp_path):
    alone = _alone(tmp_path)
    assert _same(_served(tmp_path / "served", BEFORE), alone)
    leaked = _served(tmp_path / "planted", {**BEFORE, "mode": "native", "devices": 1,
                                            "settings": ["bf16-autocast"]})
    assert not _same(leaked, alone), "bfloat16 autocast left on did not change the run"


@pytest.mark.skipif(not registry.is_installed("jax"), reason="needs jax")
def test_a_run_on_one_device_does_not_take_the_second_from_the_next(tmp_path):
    """JAX fixes its CPU devices when it starts (its first array): a server that set up 2
    but had not started would let a 1-device run set 1 again, and the 2-device run after it
    would fail (seen: "JAX started with 1 CPU devices", with the server's start-up call to
    devices() removed; TensorFlow keeps the 2 logical devices it was given either way)."""
    framework = "jax"
    server = WorkerServer(tmp_path)
    try:
        for devices in (1, 2):
            cfg = {**RUN, "framework": framework, "devices": devices, "steps_per_epoch": 2}
            out = tmp_path / f"{devices}.json"
            assert server.run(framework, cfg, out) is None
            record = json.loads(out.read_text())
            assert record["status"] == "ok" and len(record["device_names"]) == devices, record
    finally:
        server.close()
