"""benchmarks.predict on hand-built records: the scaling model's arithmetic, the link
fitted to a devices folder, validation rows, and bad input."""
import shlex

import pytest

from benchmarks import predict as P
from common.core.plan import RunConfig
from common.results.record import new_record, record_filename, write_atomic
from tests.conftest import ROOT, run_python, usage_error


def _record(folder, devices, batch, sec_per_step, steps=10, mode="native", processes=None,
            **fields):
    record = new_record(RunConfig("pytorch", mode, devices, batch_size=batch, **fields))
    record.update(status="ok", sec_per_epoch=[sec_per_step * steps], steps_per_epoch=[steps],
                  device_kind="cpu", processes=processes or devices)
    name = record_filename(record).replace("dev.json", f"-b{batch}-c{fields.get('cores_per_device')}dev.json")
    write_atomic(folder / name, record)


def test_ring_allreduce_and_compute_fit():
    link = P.Link("x", bandwidth=1e9, latency=1e-5, source="test")
    assert P.allreduce_sec(1e6, 1, link) == 0
    # k = 4: 3 x 2 latencies + 2 x 3/4 x 1 MB / 1 GB/s
    assert P.allreduce_sec(1e6, 4, link) == pytest.approx(6e-5 + 1.5e-3)
    compute = P.Compute([(64, 0.002 + 64e-5), (256, 0.002 + 256e-5)])
    assert compute.coefficients() == pytest.approx((0.002, 1e-5))
    pr = P.predict(compute, int(1e6), 256, 4, link, overlap=0.0)
    assert pr["t1"] == pytest.approx(0.002 + 64e-5) and pr["step"] == pytest.approx(pr["t1"] + pr["t2"])
    # with overlap 1, all-reduce hides behind up to 2/3 of the step
    hidden = P.predict(compute, int(1e6), 256, 4, link, overlap=1.0)
    assert hidden["step"] == pytest.approx(pr["t1"] + max(0, pr["t2"] - 2 / 3 * pr["t1"]))
    # the chapter's rule: compute beats communication by 20 % from this per-device batch on
    slow = P.Link("slow", bandwidth=1e8, latency=1e-5, source="test")
    b = P.rule_batch_on_link(compute, int(1e6), 4, slow)
    assert b == 2048 and compute(b) > 1.2 * P.allreduce_sec(1e6, 4, slow) >= compute(b // 2)


def test_predict_from_folders_with_a_measured_link(tmp_path):
    runs, dev = tmp_path / "runs", tmp_path / "devices"
    for batch in (64, 256):
        _record(runs, 1, batch, 0.002 + batch * 1e-5, cores_per_device=1)
    _record(runs, 2, 256, 0.004, cores_per_device=1)
    # a devices folder whose native all-reduce takes 2 x 50 us + bytes / (1 GB/s)
    rows = [{"variant": "native", "bytes": n, "median_s": 1e-4 + n / 1e9} for n in (4096, 2**20, 2**24)]
    write_atomic(dev / "pytorch-allreduce.devices.json", {"status": "ok", "rows": rows})
    link = P.fit_link(dev, "pytorch")
    assert link.bandwidth == pytest.approx(1e9, rel=1e-6) and link.latency == pytest.approx(5e-5)
    proc = run_python(["-m", "benchmarks.predict", str(runs), "--allreduce", str(dev)])
    assert proc.returncode == 0, proc.stderr[-2000:]
    text = (runs / "predict.md").read_text()
    assert "Predicted against measured" in text and (runs / "predict.png").exists()
    cells = _check_row(text, "native")
    want = P.predict(P.Compute([(64, 0.00264), (256, 0.00456)]), P.param_bytes("lenet"), 256, 2,
                     link, 0.0)["step"]
    assert cells[7] == "at once"                                       # a process per device
    assert float(cells[11]) == pytest.approx(want * 1e3, abs=0.01)     # predicted ms
    assert float(cells[12]) == pytest.approx(4.0, abs=0.01)            # measured ms


def _check_row(text, mode):
    """The cells of the predicted-against-measured row of a mode."""
    row = next(l for l in text.splitlines() if l.startswith("| lenet") and f"| {mode} " in l
               and l.count("|") == 16)
    return [c.strip() for c in row.strip("|").split("|")]


def test_devices_that_run_in_turn_are_predicted_from_runs_at_their_cores(tmp_path):
    """PyTorch's scratch replicas in one process compute one after another, each on the
    process's k x C cores: k steps of one device at k x C cores, not one at C."""
    for batch in (64, 256):
        _record(tmp_path, 1, batch, 0.002 + batch * 1e-5, mode="scratch", cores_per_device=1)
    _record(tmp_path, 2, 256, 0.004, mode="scratch", processes=1, cores_per_device=1)
    proc = run_python(["-m", "benchmarks.predict", str(tmp_path), "--link", "ib-100g"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "needs 1-device runs at 2 cores" in (tmp_path / "predict.md").read_text()
    for batch in (64, 256):          # twice as fast at 2 cores
        _record(tmp_path, 1, batch, (0.002 + batch * 1e-5) / 2, mode="scratch", cores_per_device=2)
    proc = run_python(["-m", "benchmarks.predict", str(tmp_path), "--link", "ib-100g"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    cells = _check_row((tmp_path / "predict.md").read_text(), "scratch")
    assert cells[7] == "in turn"
    # 2 x (a + c x 128) / 2, plus the all-reduce
    t2 = P.allreduce_sec(P.param_bytes("lenet"), 2, P.LINKS["ib-100g"])
    assert float(cells[8]) == pytest.approx((0.002 + 128e-5) * 1e3, abs=0.01)
    assert float(cells[11]) == pytest.approx((0.002 + 128e-5 + t2) * 1e3, abs=0.01)


@pytest.mark.parametrize("args,message", [
    ([], "give one of --link NAME or --allreduce DIR"),
    (["--link", "pcie4-x16", "--overlap", "2"], "must be between 0 and 1"),
    (["--link", "smoke-signals"], "invalid choice"),
    (["--link", "25gbe", "--contention", "0.5"], "must be a factor of 1 or more, or measure"),
    (["--link", "25gbe", "--fit-batches", "64"], "needs two or more batch sizes"),
    (["--link", "25gbe", "--fit-batches", "64,x"], "takes batch sizes like 64,128"),
    (["--link", "25gbe", "--link-fit-bytes", "4096"], "give --allreduce DIR"),
    (["--link", "25gbe", "--fit-batches", "64,128"], "at --fit-batches 64,128"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, message):
    _record(tmp_path, 1, 256, 0.01)
    assert message in usage_error(["-m", "benchmarks.predict", str(tmp_path), *args])


def test_devices_of_each_nodes_one_process_run_in_turn(tmp_path):
    """2 nodes of 2 devices, one process a node (processes = nodes): each node's devices
    take its cores in turn, so t1 is 2 steps at 2 cores of a quarter of the batch."""
    for batch in (64, 256):
        _record(tmp_path, 1, batch, 0.002 + batch * 1e-5, cores_per_device=1)
        _record(tmp_path, 1, batch, (0.002 + batch * 1e-5) / 2, cores_per_device=2)
    _record(tmp_path, 2, 256, 0.004, processes=2, nodes=2, network="loopback", cores_per_device=1)
    proc = run_python(["-m", "benchmarks.predict", str(tmp_path), "--link", "ib-100g"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    cells = _check_row((tmp_path / "predict.md").read_text(), "native")
    assert cells[4:8] == ["2", "4", "256", "in turn"]
    assert float(cells[8]) == pytest.approx(2 * (0.002 + 64e-5) / 2 * 1e3, abs=0.01)


def test_a_link_fit_below_two_sizes_is_bad_input(tmp_path):
    runs, dev = tmp_path / "runs", tmp_path / "devices"
    for batch in (64, 256):
        _record(runs, 1, batch, 0.002 + batch * 1e-5, cores_per_device=1)
    rows = [{"variant": "native", "bytes": n, "median_s": 1e-4 + n / 1e9} for n in (4096, 2**20)]
    write_atomic(dev / "pytorch-allreduce.devices.json", {"status": "ok", "rows": rows})
    assert "fewer than 2 of its native all-reduce sizes" in usage_error(
        ["-m", "benchmarks.predict", str(runs), "--allreduce", str(dev), "--link-fit-bytes", "4096"])


def test_no_one_device_run_is_bad_input(tmp_path):
    _record(tmp_path, 2, 256, 0.01)
    assert "no successful single-node 1-device run" in usage_error(
        ["-m", "benchmarks.predict", str(tmp_path), "--link", "25gbe"])


def test_out_of_sample_fit_holds_back_batches_nodes_and_large_all_reduces(tmp_path):
    """Compute is fitted on the single-node 1-device rows at --fit-batches only (a 2-node
    row also has 1 device per node: never fitted on); the 1-device rows at other batch
    sizes check t1 alone, the all-reduces above --link-fit-bytes check t2 alone, and the
    whole step is set beside the model without t2."""
    runs, dev = tmp_path / "runs", tmp_path / "devices"
    step = lambda b: 0.002 + b * 1e-5                                  # noqa: E731
    for batch in (64, 128, 256, 512):
        _record(runs / f"b{batch}", 1, batch, step(batch) * (1.1 if batch == 512 else 1),
                cores_per_device=1)
    # a 2-node row, 1 device a node, whose step time would bend the fit if fitted on
    _record(runs / "nodes", 1, 64, 1.0, nodes=2, network="loopback", cores_per_device=1)
    rows = [{"variant": "native", "bytes": n, "median_s": 1e-4 + n / 1e9}
            for n in (4096, 2**16, 2**20)] + [{"variant": "native", "bytes": 2**24, "median_s": 0.04}]
    write_atomic(dev / "pytorch-allreduce.devices.json", {"status": "ok", "rows": rows})
    proc = run_python(["-m", "benchmarks.predict", *map(str, sorted(runs.iterdir())),
                       "--allreduce", str(dev), "--fit-batches", "64,128",
                       "--link-fit-bytes", str(2**20), "--out", str(tmp_path)])
    assert proc.returncode == 0, proc.stderr[-2000:]
    text = (tmp_path / "predict.md").read_text()
    t1 = {int(c[5]): c for c in (_cells(l) for l in text.splitlines())
          if len(c) == 9 and c[0] == "lenet"}
    assert sorted(t1) == [256, 512] and t1[256][4] == "64, 128"
    assert float(t1[256][6]) == pytest.approx(step(256) * 1e3, abs=0.01) and t1[256][8] in ("+0%", "-0%")
    assert t1[512][8] == "-9%"                          # 1 / 1.1 - 1
    nodes = next(c for c in map(_cells, text.splitlines()) if len(c) == 15 and c[4] == "2")
    link = P.fit_link(dev, "pytorch", "native", 2**20)
    t1_pred = step(32)                                  # batch 64 over 2 nodes
    assert float(nodes[8]) == pytest.approx(t1_pred * 1e3, abs=0.01)
    assert nodes[14] == f"{t1_pred / 1.0 - 1:+.0%}"     # the model without t2
    t2 = next(c for c in map(_cells, text.splitlines()) if len(c) == 6 and c[0] == "pytorch")
    assert t2[2] == "16 MiB" and float(t2[3]) == pytest.approx(
        P.allreduce_sec(2**24, 2, link) * 1e3, abs=0.01) and t2[4] == "40.00"
    assert "t1 alone (1 device, batch sizes not fitted on): 2 of 2 within 20 %" in text


def _cells(line):
    return [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else []


def test_devices_at_once_on_one_machine_compute_slower_by_the_contention_given(tmp_path):
    for batch in (64, 256):
        _record(tmp_path, 1, batch, 0.002 + batch * 1e-5, cores_per_device=1)
    _record(tmp_path, 2, 256, 0.004, cores_per_device=1)
    proc = run_python(["-m", "benchmarks.predict", str(tmp_path), "--link", "ib-100g",
                       "--contention", "1.5"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    text = (tmp_path / "predict.md").read_text()
    cells = _check_row(text, "native")
    assert float(cells[8]) == pytest.approx(1.5 * (0.002 + 128e-5) * 1e3, abs=0.01)
    assert "1.50 at k = 2 (given)" in text


def test_contention_is_one_cores_rate_alone_over_its_rate_beside_the_others(monkeypatch):
    """The arithmetic on given rates (a timed figure has no place in a unit test), and
    the kernel really runs, pinned, in a process of its own."""
    rates = {1: [[100.0], [90.0], [110.0]], 2: [[50.0, 70.0], [45.0, 45.0], [55.0, 55.0]]}
    calls = []

    def fake(cores, seconds):
        calls.append(len(cores))
        return rates[len(cores)][sum(c == len(cores) for c in calls) - 1]
    monkeypatch.setattr(P, "_rates", fake)
    if len(P.os.sched_getaffinity(0)) >= 2:
        # rounds: 100 / 60, 90 / 45, 110 / 55 -> median 2.0
        assert P.measure_contention(2, rounds=3) == pytest.approx(2.0)
    monkeypatch.undo()
    got = P._rates(sorted(P.os.sched_getaffinity(0))[:1], 0.1)
    assert len(got) == 1 and got[0] > 0


@pytest.mark.parametrize("page", ["predict.md", "link-16mib/predict.md"])
def test_the_committed_validation_regenerates_from_its_committed_records(tmp_path, page):
    """docs/results/predictor's predictions (the out-of-sample validation
    docs/results/cpu-2core-predictor.md quotes) are what their own commands make of the
    records committed beside them: rerun, the same text."""
    page = ROOT / "docs/results/predictor" / page
    committed = page.read_text()
    command = committed.split("Command: `", 1)[1].split("`", 1)[0]
    args = shlex.split(command)[3:]                   # after python -m benchmarks.predict
    args[args.index("--out") + 1] = str(tmp_path)
    proc = run_python(["-m", "benchmarks.predict", *args])
    assert proc.returncode == 0, proc.stderr[-2000:]
    body = lambda text: text.split("\n", 3)[3]        # noqa: E731 - all but title and command
    assert body((tmp_path / "predict.md").read_text()) == body(committed)


def link_source_gaps(links: dict) -> list[str]:
    """Where a named link's figures are not its source line's: the bandwidth the nominal
    "N GB/s each way" times its "xD" derating, the latency its "N us per hop"."""
    import re
    gaps = []
    for name, link in links.items():
        nominal = re.search(r"([\d.]+) GB/s each way", link.source)
        derate = re.search(r", x([\d.]+)", link.source)
        hop = re.search(r"(\d+) us per hop", link.source)
        if not (nominal and derate and hop):
            gaps.append(f"{name}: its source line does not say each figure")
            continue
        if abs(link.bandwidth - float(derate[1]) * float(nominal[1]) * 1e9) > 1e-6 * link.bandwidth:
            gaps.append(f"{name}: bandwidth {link.bandwidth:.4g} is not the source's")
        if abs(link.latency - float(hop[1]) * 1e-6) > 1e-12:
            gaps.append(f"{name}: latency {link.latency:g} is not the source's")
    return gaps


def test_every_named_links_figures_are_its_source_lines():
    """Issue 53: the NVLink, PCIe, Ethernet and InfiniBand figures were typed beside their
    sources with nothing holding one to the other. Planted: NVLink's derating and PCIe's
    latency changed without their lines."""
    import dataclasses
    assert link_source_gaps(P.LINKS) == []
    planted = {**P.LINKS, "nvlink-h100": dataclasses.replace(P.LINKS["nvlink-h100"], bandwidth=0.9 * 450e9),
               "pcie4-x16": dataclasses.replace(P.LINKS["pcie4-x16"], latency=5e-6)}
    assert [g.split(":")[0] for g in link_source_gaps(planted)] == ["nvlink-h100", "pcie4-x16"]
