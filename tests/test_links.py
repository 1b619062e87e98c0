"""benchmarks.links: its options, the link probe across emulated nodes, and the page's
arithmetic and predictor on records made from a known law (so each figure's expected
value is exact), each with the bug it exists for planted."""
import json
import subprocess
import sys

import pytest

from benchmarks import links, links_report
from common import models
from common.launch import netns
from tests.conftest import ROOT, subprocess_env

P = models.param_bytes("lenet")


@pytest.mark.parametrize("argv, says", [
    (["--rates", "10mbps"], "not a rate like 100mbit"),
    (["--framework", "caffe"], "caffe"),
    (["--model", "vgg"], "vgg"),
    (["--fit-rate", "fast"], "--fit-rate 'fast'"),
    (["--report", "/nonexistent/links"], "is not a folder"),
])
def test_bad_options_exit_2_with_one_line(argv, says, tmp_path):
    done = subprocess.run([sys.executable, "-m", "benchmarks.links", *argv, "--out",
                           str(tmp_path / "o")], capture_output=True, text=True, cwd=ROOT,
                          env=subprocess_env())
    assert done.returncode == 2, done.stderr
    assert says in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (tmp_path / "o").exists()         # nothing written


def test_the_formulas():
    assert links_report.ring_bytes(P, 2) == P
    assert links_report.ring_bytes(P, 4) == 1.5 * P
    assert links_report.busiest_bytes(P, 4, "per-node") == 1.5 * P
    assert links_report.busiest_bytes(P, 4, "one") == 3 * P         # node 0 answers 3 pulls
    assert links_report.busiest_bytes(P, 4, None) == 1.5 * P


def test_the_probe_is_the_slowest_rank_and_the_median_repeat():
    probe = {"ranks": [{"times": [1.0, 5.0, 2.0], "tx_bytes": [9, 10, 11]},
                       {"times": [3.0, 1.0, 1.0], "tx_bytes": [1, 1, 1]}]}
    assert links_report.probe_sec(probe) == 3.0           # max per repeat: 3, 5, 2
    assert links_report.probe_sent(probe) == 10
    assert links_report.probe_sec({"error": "x"}) is None


@pytest.mark.skipif(netns.unavailable() is not None, reason=netns.unavailable() or "")
def test_the_probe_all_reduces_across_the_link(tmp_path):
    """Two emulated nodes: the probe's all-reduce sends a ring's bytes over each node's
    link (about P each for 2 nodes); planted, gloo told to use the namespace's loopback,
    it cannot reach the other node and the probe says why instead of a time."""
    nbytes = 1_000_000
    links.probe(tmp_path / "p.json", 2, netns.UNSHAPED, nbytes)
    got = json.loads((tmp_path / "p.json").read_text())
    assert "error" not in got, got.get("error")
    sent = links_report.probe_sent(got)
    assert links_report.ring_bytes(nbytes, 2) <= sent < 1.2 * links_report.ring_bytes(nbytes, 2)
    assert links_report.probe_sec(got) > 0

    planted = tmp_path / "planted.json"
    old = links.PROBE_IFNAME
    try:
        links.PROBE_IFNAME = "lo"
        links.probe(planted, 2, netns.UNSHAPED, nbytes, timeout=20)
    finally:
        links.PROBE_IFNAME = old
    assert "error" in json.loads(planted.read_text())


def _record(framework, batch, step, nodes=1, rate=None, servers=None, sent=None, steps=8):
    """A compare record whose step time is `step` seconds."""
    r = {"framework": framework, "status": "ok", "mode": "native", "model": "lenet",
         "batch_size": batch, "devices": 1, "nodes": nodes, "servers": servers,
         "sec_per_epoch": [step * steps, step * steps], "steps_per_epoch": [steps, steps],
         "env": {"cpu_count": 2}, "cores_per_device": 1 if nodes == 2 and not servers else None}
    if rate:
        r["link"] = {"rate": rate, "timed_steps": 2 * steps,
                     "tx_bytes": [2 * steps * s for s in sent]}
    return r


def _folder(tmp_path, law_a=0.01, law_c=0.0005, eff=0.9, overhead=0.03):
    """A links folder whose every figure follows t1 = a + c b, the probe's t2 = bytes /
    (0.9 x rate) and the step t1 + overhead + bytes / (eff x rate): the predictor must
    recover it exactly when eff is the probe's."""
    def write(folder, record):
        folder.mkdir(parents=True, exist_ok=True)
        name = f"{record['framework']}-native-{record['nodes']}nodes-1dev.json"
        (folder / name).write_text(json.dumps(record))

    def t1(b):
        return law_a + law_c * b
    for b in (32, 128, 512):
        write(tmp_path / "lenet" / f"compute-b{b}", _record("pytorch", b, t1(b)))
    for rate in ("10mbit", "100mbit", "1gbit"):
        t2 = P / (eff * netns.rate_bits(rate) / 8)
        write(tmp_path / "lenet" / f"n2-{rate}",
              _record("pytorch", 256, t1(128) + t2 + overhead, 2, rate, sent=[P, P]))
        probe = {"ranks": [{"times": [P / (0.9 * netns.rate_bits(rate) / 8)] * 3,
                            "tx_bytes": [P] * 3}] * 2}
        (tmp_path / "lenet" / f"probe-n2-{rate}.json").write_text(json.dumps(probe))
    return t1


def test_the_predictor_recovers_a_known_law_out_of_sample(tmp_path):
    _folder(tmp_path)
    data = links_report.load(tmp_path)
    preds = links_report.predictions(data, "100mbit")
    rates = sorted(p["row"].rate for p in preds)
    assert rates == ["10mbit", "1gbit"]            # the fit rate's row is not validated
    for p in preds:
        assert abs(p["err"]) < 1e-9, p            # the law, recovered from one rate
        assert p["err_t2_0"] < -0.1               # and t2 = 0 misses it
        assert abs(p["t1_err"]) < 1e-9            # t1 fitted on 32 and 512, checked at 128
        assert abs(p["t2_err"]) < 1e-9            # the probe's efficiency, from 100mbit only


def test_a_wrong_law_shows_as_error(tmp_path):
    """Planted: the engine's communication at half the probe's efficiency, which the
    constant o fitted at 100mbit cannot absorb: the other rates' errors must show it."""
    _folder(tmp_path, eff=0.45)
    preds = links_report.predictions(links_report.load(tmp_path), "100mbit")
    assert all(abs(p["err"]) > 0.05 for p in preds), preds


def test_the_page_says_what_was_measured_and_calculated(tmp_path):
    _folder(tmp_path)
    (tmp_path / "command.txt").write_text("python -m benchmarks.links --out X")
    assert links_report.write_page(tmp_path, "100mbit") == 0
    page = (tmp_path / "links.md").read_text()
    assert "python -m benchmarks.links --out X" in page
    assert "| pytorch | 10mbit |" in page and "Calculated:" in page
    assert (tmp_path / "links-lenet.png").is_file()
    # the table's t1 is the compute run at the node runs' batch (128 per device): 74 ms
    row = next(line for line in page.splitlines() if line.startswith("| pytorch | 10mbit |"))
    assert row.split(" | ")[2] == "74.0"


COMMITTED = ROOT / "docs" / "results" / "links"
PAGE = ROOT / "docs" / "results" / "cpu-2core-links.md"


@pytest.mark.skipif(not COMMITTED.is_dir(), reason="no committed links records")
def test_the_committed_page_is_its_records(tmp_path):
    """Every table row of docs/results/cpu-2core-links.md is what the committed records
    give (the page rebuilt from a copy of them): no figure edited by hand, none stale."""
    import shutil
    shutil.copytree(COMMITTED, tmp_path / "links")
    assert links_report.write_page(tmp_path / "links", "100mbit") == 0
    rebuilt = (tmp_path / "links" / "links.md").read_text().splitlines()
    page = PAGE.read_text().splitlines()
    rows = [line for line in rebuilt if line.startswith("| ")]
    assert len(rows) > 20
    missing = [line for line in rows if line not in page]
    assert not missing, missing[:3]
