"""The device experiments (python -m benchmarks.devices): each framework's results
are right, a run writes its records and report, bad input exits 2, a crash in one
experiment leaves the other records. Every framework runs in a process of its own
(the command starts one worker per framework), on tiny sizes (--quick)."""
from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from common.facts import registry
from common.experiments.device_experiments import EXPERIMENTS
from tests.conftest import (ROOT, THREADS, covered, having, incomplete_subclass_error, interrupt,
                            lacking, run_python, subprocess_env, usage_error)

BAD_INPUT = [
    (["--framework", "caffe"], "unknown framework 'caffe'"),
    (["--experiment", "matmul,gemv"], "unknown experiment 'gemv'"),
    (["--experiment", ","], "--experiment ',' has an empty name"),
    (["--framework", "pytorch,"], "--framework 'pytorch,' has an empty name"),
    (["--device", "tpu"], "argument --device: invalid choice"),
    (["--repeat", "0"], "must be at least 1"),
    (["--out", "/proc/devices-out"], "cannot be created or written"),
]


@pytest.mark.parametrize("args,message", BAD_INPUT)
def test_bad_input_is_one_line_and_exit_2(args, message):
    assert message in usage_error(["-m", "benchmarks.devices", *args])


def test_an_incomplete_backend_fails_loudly():
    error = incomplete_subclass_error("common.experiments.ops", "Ops", "visible_devices")
    assert "abstract" in error and "matmul" in error, error


def test_runner_kills_the_whole_group_on_timeout(tmp_path):
    from benchmarks.runner import run_worker
    child = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); print('up', flush=True); time.sleep(60)"
    lines = []
    t0 = time.monotonic()
    ex = run_worker(["-c", child], tmp_path / "w.log", 2, lines.append)   # python prepended
    assert ex.timed_out and ex.code is not None and ex.code < 0
    assert [line.strip() for line in lines] == ["up"]
    assert time.monotonic() - t0 < 30     # the grandchild held no pipe open: it died too


@pytest.fixture(scope="session")
def devices_run(tmp_path_factory):
    """framework -> (its records by experiment, its results folder): one quick run
    of every experiment, in the command's own worker process, made once."""
    cache = {}

    def get(framework):
        if framework not in cache:
            if not registry.is_installed(framework):
                pytest.fail(f"{framework} is required here but not installed")
            out = tmp_path_factory.mktemp(f"devices-{framework}")
            proc = run_python(["-m", "benchmarks.devices", "--framework", framework, "--quick",
                               "--repeat", "2", "--device", "cpu", "--threads", str(THREADS),
                               "--out", str(out), "--json"], timeout=300)
            assert proc.returncode == 0, proc.stderr[-3000:]
            records = {r["experiment"]: r for r in json.loads(proc.stdout)}
            cache[framework] = records, out
        return cache[framework]
    return get


EXPECTED_CHECKS = {            # experiment -> a phrase every framework's checks must contain
    "matmul": "equals NumPy's",
    "logging": "both variants give the same norms",
    "two-devices": "equals NumPy's",
    "async": "y = x + 1",
    "roundtrip": "bit-exact",
    "allreduce": "holds the sum",
}


@pytest.mark.parametrize("name", list(EXPERIMENTS))
@pytest.mark.parametrize("framework", having("devices"))
def test_each_experiment_is_right(devices_run, framework, name):
    records, out = devices_run(framework)
    r = records[name]
    if name == "overlap":      # a CPU run: nothing to copy, said so
        assert r["status"] == "not-applicable" and "CPU only" in r["error"], r
        return
    assert r["status"] == "ok", f"{r['error']}\n{r.get('traceback', '')}"
    assert r["checks"] and all(c["ok"] for c in r["checks"])
    assert any(EXPECTED_CHECKS[name] in c["name"] for c in r["checks"]), r["checks"]
    measured = [row for row in r["rows"] if "median_s" in row]
    assert measured and all(row["min_s"] <= row["median_s"] <= row["max_s"] for row in measured)
    on_disk = json.loads((out / f"{framework}-{name}.devices.json").read_text())
    assert on_disk["status"] == r["status"] and on_disk["rows"] == r["rows"]


@pytest.mark.parametrize("framework", having("devices"))
def test_allreduce_checks_every_device_by_hand_and_native(devices_run, framework):
    r = devices_run(framework)[0]["allreduce"]
    variants = {row["variant"] for row in r["rows"]}
    assert variants == {"by hand (chapter)", "native"}
    names = " ".join(c["name"] for c in r["checks"])
    assert "by hand" in names and "native" in names
    for row in r["rows"]:
        assert row["busbw"] == pytest.approx(row["algbw"])     # 2(n-1)/n = 1 for n = 2


@pytest.mark.parametrize("framework", lacking("devices"))
def test_a_listed_gap_is_recorded_for_every_experiment(devices_run, framework):
    """Where the facts list the experiments as a gap, every record says not-applicable
    with their reason (and once they run, this fails: remove the gap)."""
    records, _ = devices_run(framework)
    assert {(r["status"], r["error"]) for r in records.values()} == {
        ("not-applicable", registry.gap(framework, "devices"))}


def test_a_run_writes_records_report_and_plots(devices_run):
    framework = covered()[0]
    records, out = devices_run(framework)
    assert set(records) == set(EXPERIMENTS)
    report = (out / "report.md").read_text()
    for exp in EXPERIMENTS.values():
        assert f"(`{exp.name}`)" in report
    for png in ("matmul_gflops.png", "allreduce_busbw.png", "sync_vs_device_log.png"):
        assert (out / png).stat().st_size > 1000
    again = run_python(["-m", "benchmarks.devices_report", str(out), "--no-plots"])
    assert again.returncode == 0, again.stderr
    assert (out / "report.md").read_text() == report


def test_a_crash_in_one_experiment_leaves_the_others(tmp_path):
    framework = "pytorch" if "pytorch" in covered() else covered()[0]
    env = {**subprocess_env(), "DL_COMPARE_DEVICES_CRASH": "logging"}
    proc = subprocess.run([sys.executable, "-m", "benchmarks.devices", "--framework", framework,
                           "--experiment", "matmul,logging,roundtrip", "--quick", "--repeat", "2",
                           "--threads", str(THREADS),
                           "--out", str(tmp_path), "--json", "--no-plots"],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert proc.returncode == 1, proc.stderr[-2000:]
    by_name = {r["experiment"]: r for r in json.loads(proc.stdout)}
    assert by_name["logging"]["status"] == "failed"
    assert "signal 6" in by_name["logging"]["error"]
    # the one before the crash was kept; the one after ran in a new worker
    assert by_name["matmul"]["status"] == "ok" and by_name["roundtrip"]["status"] == "ok"
    on_disk = {json.loads(p.read_text())["experiment"] for p in tmp_path.glob("*.devices.json")}
    assert on_disk == {"matmul", "logging", "roundtrip"}
    assert "failed" in (tmp_path / "report.md").read_text()


def test_gpu_experiments_without_a_gpu_say_not_applicable(tmp_path):
    from common.facts.machine import gpu_count
    if gpu_count():
        pytest.skip("this machine has a GPU")
    framework = "pytorch" if "pytorch" in covered() else covered()[0]
    proc = run_python(["-m", "benchmarks.devices", "--framework", framework, "--device", "gpu",
                       "--experiment", "matmul,overlap", "--quick", "--out", str(tmp_path),
                       "--threads", str(THREADS), "--json", "--no-plots"], timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    for r in json.loads(proc.stdout):
        assert r["status"] == "not-applicable" and "no GPU" in r["error"], r


def test_an_out_being_written_is_refused(tmp_path):
    from benchmarks.cli import LOCK_FILE
    import os
    (tmp_path / LOCK_FILE).write_text(f"{os.getppid()}\n")               # a live process
    assert "being written by another run" in usage_error(["-m", "benchmarks.devices",
                                                          "--out", str(tmp_path)])
    assert sorted(p.name for p in tmp_path.iterdir()) == [LOCK_FILE]


def test_sigint_stops_the_run_and_keeps_what_finished(tmp_path):
    framework = covered()[0]
    out = tmp_path / "out"
    interrupt(["-m", "benchmarks.devices", "--framework", framework, "--experiment",
               "logging,matmul", "--repeat", "50", "--threads", str(THREADS), "--out", str(out),
               "--no-plots"], out,
              ready=(out / f"{framework}-logging.devices.json").exists,
              settle=2)                           # matmul is being measured by then
    status = {json.loads(p.read_text())["experiment"]: json.loads(p.read_text())["status"]
              for p in out.glob("*.devices.json")}
    assert status == {"logging": "ok", "matmul": "interrupted"}, status
    assert "interrupted" in (out / "report.md").read_text()
    assert not (out / ".lock").exists()


def test_gpu_rows_read_against_the_best_framework():
    """On a GPU NumPy has no figure: each product reads against the best framework at
    that size in the same run (computed at report time, from records as a GPU run
    writes them)."""
    from common.reports import device_experiments as device_report
    from common.experiments.device_experiments import new_record

    def record(framework, gflops):
        r = new_record(framework, "matmul", status="ok", device_kinds=["cpu", "gpu"])
        r["rows"] = [{"device": "gpu:0", "size": n, "median_s": 2 * n**3 / g / 1e9,
                      "min_s": 0.1, "max_s": 0.2, "gflops": g} for n, g in gflops.items()]
        return r
    records = [record("pytorch", {4096: 40000.0, 16384: 50000.0}),
               record("mxnet", {4096: 30000.0, 16384: 55000.0})]
    text = device_report.markdown_report(records, "cmd")
    assert records[0]["rows"][0]["vs_best_gpu"] == 1.0
    assert records[0]["rows"][1]["vs_best_gpu"] == pytest.approx(50000 / 55000)
    assert records[1]["rows"][0]["vs_best_gpu"] == pytest.approx(0.75)
    assert "of best GPU" in text and "Largest GPU product: best framework mxnet" in text
    assert "91% of best GPU" in device_report.headline(records[0])
