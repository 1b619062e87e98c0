"""benchmarks.report for other programs and over time, on small synthetic records (no
run): --format csv|json, the history file (--append-history), its plot (--plot-history)
and the regression gate against it (--against-history), and their bad input."""
from __future__ import annotations

import csv
import io
import json
import re
import statistics
from pathlib import Path

import pytest

from benchmarks import report
from common.core.plan import RunConfig
from common.reports import export, history
from common.results.record import new_record, record_filename, write_atomic

ROOT = Path(__file__).resolve().parent.parent
ENV = {"cpu_model": "CPU X", "cpu_count": 2, "gpu_model": None, "os": "Linux", "python": "3.11",
       "cxx": None, "libraries": {"numpy": "1.26.4", "torch": "2.13.0"}, "commit": "abc123"}


def _record(framework="pytorch", mode="scratch", devices=1, secs=(1.0, 1.0), status="ok",
            repeats=None, **extra) -> dict:
    r = new_record(RunConfig(framework, mode, devices, dataset="synthetic", epochs=len(secs),
                             batch_size=64))
    r.update(status=status, sec_per_epoch=list(secs), steps_per_epoch=[4] * len(secs),
             eval_sec=[0.5] * len(secs), train_loss=[2.0, 1.5][: len(secs)], test_accuracy=0.5,
             device_kind="cpu", framework_version="2.13.0", **{"env": dict(ENV), **extra})
    if repeats:
        r["repeats"] = [{"status": "ok", "sec_per_epoch": list(s), "steps_per_epoch": [4] * len(s)}
                        for s in repeats]
    return r


def _repeated(secs, **extra) -> dict:
    """A record of one configuration with these repeats' sec/epoch (one epoch each)."""
    secs = tuple(secs)
    return _record(secs=secs[:1], repeats=[(x,) for x in secs] if len(secs) > 1 else None, **extra)


def _folder(path: Path, records: list[dict]) -> Path:
    for r in records:
        write_atomic(path / record_filename(r), r)
    return path


def _main(args, capsys):
    code = report.main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def test_rows_as_csv_and_json(tmp_path, capsys):
    folder = _folder(tmp_path / "a", [
        _record(secs=(2.0, 1.0, 3.0)),
        _record(devices=2, secs=(9.0,), repeats=[(1.0, 2.0), (3.0, 5.0), (2.0, 2.0)],
                trace={"file": "x.trace.json", "note": "perturbed"}),
        _record("mxnet", status="failed", secs=(), error="boom")])
    code, out, _ = _main([folder, "--format", "csv"], capsys)
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert list(rows[0]) == list(export.COLUMNS) and len(rows) == 3
    one, two, failed = sorted(rows, key=lambda r: (r["framework"] != "pytorch", r["devices"]))
    assert float(one["sec_per_epoch_median"]) == 2.0 and one["epochs_timed"] == "3"
    assert float(one["samples_per_sec_median"]) == 4 * 64 / 2.0
    # repeats: the median of each repeat's median epoch time (1.5, 4.0, 2.0) -> 2.0
    assert float(two["sec_per_epoch_median"]) == 2.0 and two["repeats_ok"] == "3"
    assert float(two["sec_per_epoch_spread"]) == pytest.approx((4.0 - 1.5) / 2.0)
    assert float(two["speedup"]) == 1.0 and two["trace_file"] == "x.trace.json"
    assert one["sec_per_epoch_spread"] == "" and one["trace_file"] == ""
    assert failed["status"] == "failed" and failed["error"] == "boom" and failed["sec_per_epoch_median"] == ""
    assert one["cpu_model"] == "CPU X" and one["commit"] == "abc123" and one["sync_bn"] == "False"
    assert one["python_version"] == "3.11" and one["numpy_version"] == "1.26.4"
    # the same rows as JSON, to a file
    target = tmp_path / "rows.json"
    code, out, _ = _main([folder, "--format", "json", "--output", target], capsys)
    table = json.loads(target.read_text())
    assert code == 0 and out == "" and [list(r) for r in table] == [list(export.COLUMNS)] * 3
    assert {r["sec_per_epoch_median"] for r in table} == {2.0, None}
    assert not (folder / "report.md").exists()           # rows only: nothing re-rendered


def _undocumented(columns, text: str) -> list[str]:
    defined = set(re.findall(r"^\|\s*`(\w+)`", text, re.M))
    return [c for c in columns if c not in defined]


def test_every_column_is_defined_in_the_docs():
    text = (ROOT / "docs" / "report.md").read_text()
    assert _undocumented(export.COLUMNS, text) == []
    assert _undocumented([*export.COLUMNS, "a_new_key"], text) == ["a_new_key"]   # seen failing


def _history(tmp_path, secs_by_commit) -> Path:
    """A history of one configuration measured at each commit (a folder each): its
    sec/epoch, or a tuple of its repeats' sec/epoch."""
    path = tmp_path / "history.jsonl"
    for i, (commit, sec) in enumerate(secs_by_commit):
        r = _repeated(sec if isinstance(sec, tuple) else (sec,), env={**ENV, "commit": commit})
        folder = _folder(tmp_path / f"h{i}", [r])
        assert report.main([str(folder), "--append-history", str(path)]) == 0
    return path


def test_a_history_line_per_successful_run_once(tmp_path, capsys):
    folder = _folder(tmp_path / "a", [_record(), _record("mxnet", status="failed", secs=())])
    path = tmp_path / "h.jsonl"
    code, out, _ = _main([folder, "--append-history", path], capsys)
    assert code == 0 and "1 run(s) appended" in out and "1 unsuccessful left out" in out
    code, out, _ = _main([folder, "--append-history", path], capsys)
    assert code == 0 and "0 run(s) appended, 1 already there" in out
    (line,) = history.read(path)
    assert line["commit"] == "abc123" and line["versions"]["torch"] == "2.13.0"
    assert line["machine"]["cpu_model"] == "CPU X" and re.match(r"\d{4}-\d\d-\d\dT", line["date"])
    assert line["row"]["sec_per_epoch_median"] == 1.0 and line["file"] == "pytorch-scratch-1dev.json"
    assert line["sec_per_epoch_repeats"] == [1.0]               # what the gate's test weighs


STEADY = (1.0, 1.02, 0.98)                     # a run's 3 repeats' sec/epoch


def _times(k: float) -> tuple:
    return tuple(k * x for x in STEADY)


@pytest.mark.parametrize("past, after, last, code, verdict", [
    ([STEADY], STEADY, 1, 0, "within noise (p"),              # an equal run passes
    ([STEADY], _times(2), 1, 1, "slower (p"),                 # a slower one fails
    ([STEADY], _times(0.5), 1, 0, "faster (p"),
    ([STEADY, STEADY, _times(1.5)], _times(1.5), 1, 0, "within noise (p"),  # the last run was as slow
    ([STEADY, STEADY, _times(1.5)], _times(1.5), 3, 1, "slower (p"),  # the last three's repeats were not
    # the last three's repeats, one run slow: 0.87x, just inside the band, and unsure
    ([STEADY, STEADY, _times(1.5)], STEADY, 3, 0, "too few repeats: more than 20"),
    ([(1.0,)], (2.0,), 1, 0, "too few repeats: 2 or more"),  # one repeat: no verdict
])
def test_the_gate_against_the_history(tmp_path, capsys, past, after, last, code, verdict):
    path = _history(tmp_path, [(f"c{i}", sec) for i, sec in enumerate(past)])
    folder = _folder(tmp_path / "new", [_repeated(after, warmup_sec=7.0)])
    got, out, err = _main([folder, "--against-history", path, "--last", last, "--fail-on-slower"],
                          capsys)
    assert got == code and verdict in out, out + err
    # without --fail-on-slower the gate only reports
    assert report.main([str(folder), "--against-history", str(path), "--last", str(last)]) == 0


def test_a_history_line_without_its_repeats_is_one_figure(tmp_path, capsys):
    """Lines appended before the repeats were kept have their median only."""
    path = _history(tmp_path, [("old", STEADY)])
    (line,) = history.read(path)
    assert line["sec_per_epoch_repeats"] == list(STEADY)
    del line["sec_per_epoch_repeats"]
    path.write_text(json.dumps(line) + "\n")
    folder = _folder(tmp_path / "new", [_repeated(_times(2))])
    code, out, err = _main([folder, "--against-history", path, "--fail-on-slower"], capsys)
    assert code == 0 and "1 / 3" in out and "too few repeats: 2 or more" in out, out + err


def test_the_gate_takes_neither_the_folders_own_runs_nor_another_machine(tmp_path, capsys):
    path = _history(tmp_path, [("old", STEADY)])
    elsewhere = _folder(tmp_path / "gpu", [_repeated(_times(0.1), env={**ENV, "gpu_model": "H100",
                                                                        "commit": "gpu"})])
    assert report.main([str(elsewhere), "--append-history", str(path)]) == 0
    folder = _folder(tmp_path / "new", [_repeated(STEADY, warmup_sec=3.0, env={**ENV, "commit": "new"})])
    assert report.main([str(folder), "--append-history", str(path)]) == 0
    code, out, err = _main([folder, "--against-history", path, "--fail-on-slower"], capsys)
    # against the run before it: not itself, not the GPU's
    assert code == 0 and "within noise (p" in out and "1 run(s): old" in out, out + err
    only = _folder(tmp_path / "only", [_record(secs=(2.0,), env={**ENV, "cpu_model": "CPU Y"})])
    code, _, err = _main([only, "--against-history", path], capsys)
    assert code == 2 and "has a baseline" in err and len(err.strip().splitlines()) == 1


def test_the_gate_holds_each_schedule_to_its_own(tmp_path):
    """Model mode's schedules are distinct measurements: a 1F1B run has no GPipe baseline,
    and a history line from before the schedule was recorded is GPipe's."""
    def line(r):
        (entry,) = history.lines_of([r], [_folder(tmp_path / "past", [r]) / record_filename(r)], 0)
        return entry
    gpipe = _record(mode="model", devices=2, secs=(1.0,), env={**ENV, "commit": "old"})
    old = line(gpipe)
    del old["row"]["schedule"]
    now = [_record(mode="model", devices=2, secs=(1.05,)),
           _record(mode="model", devices=2, secs=(3.0,), schedule="1f1b")]
    rows, missing = history.against(now, [old])
    # one repeat a side: matched, and too few for a verdict (common.reports.verdict)
    assert [(r["mode"], r["verdict"]) for r in rows] == [("model gpipe eager", "too few repeats")]
    assert [r["schedule"] for r in missing] == ["1f1b"]


def test_the_gate_holds_a_tuned_run_to_runs_with_its_settings(tmp_path, capsys):
    """A run with settings is set only against runs with the same settings, and every
    label of it reads tuned (a+b): the gate's lines, the history plot's legend and the
    exported rows. Planted (issue 49): the settings left out of history.SAME set the tuned
    run against the default one; the export row's joined string labelled letter by letter
    ("o+m+p+-+a+f+f+...")."""
    path = _history(tmp_path, [("default", STEADY)])
    tuned = _folder(tmp_path / "tuned", [_repeated(_times(0.5), settings=["omp-affinity"],
                                                   env={**ENV, "commit": "tuned"})])
    code, out, err = _main([tuned, "--against-history", path], capsys)
    assert code == 2 and "has a baseline" in err, "a tuned run has no default baseline"
    assert report.main([str(tuned), "--append-history", str(path)]) == 0
    again = _folder(tmp_path / "again", [_repeated(_times(0.5), settings=["omp-affinity"],
                                                   env={**ENV, "commit": "again"})])
    code, out, err = _main([again, "--against-history", path, "--fail-on-slower"], capsys)
    assert code == 0 and "1 run(s): tuned" in out and "within noise (p" in out, out + err
    assert "tuned (omp-affinity)" in out and "o+m+p" not in out
    both = [_repeated(STEADY, settings=["compiled", "omp-affinity"])]
    rows, missing = history.against(both, history.read(path))
    assert rows == [] and [r["settings"] for r in missing] == ["compiled+omp-affinity"]
    entries = history.read(path)
    assert [history.label(e["row"]) for e in entries] == [
        "pytorch lenet scratch eager x1", "pytorch lenet scratch tuned (omp-affinity) eager x1"]
    # a history line appended before settings were joined by + reads the same
    old = {**entries[1]["row"], "settings": "compiled,omp-affinity"}
    assert history.label(old) == "pytorch lenet scratch tuned (compiled+omp-affinity) eager x1"
    assert history._same(old) == history._same(export.rows(both)[0])
    (row,) = export.rows(both)
    assert row["mode_label"] == "scratch tuned (compiled+omp-affinity)"


def test_a_tuned_rows_speedup_is_against_the_tuned_1_device_row():
    """Speed-up over the 1-device row with the same settings, not the defaults' (planted:
    the settings left out of summarize's key set the tuned x2 against whichever x1 came
    last, here the defaults' at 4.0 s)."""
    from common.reports import runs
    tuned = ["omp-affinity"]
    rows = runs.summarize([_record(secs=(2.0,), settings=tuned), _record(secs=(4.0,)),
                           _record(devices=2, secs=(1.0,), settings=tuned),
                           _record(devices=2, secs=(2.0,))])
    assert [r["speed-up"] for r in rows] == [1.0, 1.0, 2.0, 2.0]


def test_the_history_plot(tmp_path, capsys):
    path = _history(tmp_path, [("c1", 1.0), ("c2", 1.2)])
    png = tmp_path / "h.png"
    code, out, err = _main(["--plot-history", path, "--output", png], capsys)
    assert code == 0 and png.read_bytes()[:4] == b"\x89PNG", err
    other = _folder(tmp_path / "m", [_record("mxnet", env={**ENV, "libraries": {"mxnet": "1.9.1"}})])
    assert report.main([str(other), "--append-history", str(path)]) == 0
    code, _, err = _main(["--plot-history", path, "--by", "version"], capsys)
    assert code == 2 and "--framework NAME" in err
    code, _, err = _main(["--plot-history", path, "--by", "version", "--framework", "mxnet"], capsys)
    assert code == 0 and (tmp_path / "history.png").is_file()


@pytest.mark.parametrize("args, says", [
    (["{a}", "--format", "xml"], "invalid choice: 'xml'"),
    (["{a}", "{a}", "--format", "csv"], "--format reads one folder"),
    (["{a}", "--last", "2"], "--last N is for --against-history"),
    (["{a}", "--against-history", "{tmp}/none.jsonl"], "no such file"),
    (["{a}", "--output", "x.csv"], "--output is where --format or --plot-history write"),
    (["--format", "csv"], "give a results folder"),
    (["{tmp}", "--format", "csv"], "no run records"),
    (["--plot-history", "{tmp}/bad.jsonl"], "bad.jsonl:2: not a JSON line"),
    (["{a}", "--against-history", "{tmp}/bad.jsonl"], "bad.jsonl:2: not a JSON line"),
    (["--plot-history", "{tmp}/old.jsonl"], "old.jsonl:1: not a history line of schema 1"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, args, says):
    a = _folder(tmp_path / "a", [_record()])
    good = history.lines_of([_record()], [a / "pytorch-scratch-1dev.json"], 0.0)[0]
    (tmp_path / "bad.jsonl").write_text(json.dumps(good) + "\n{not json\n")
    (tmp_path / "old.jsonl").write_text(json.dumps({"schema": 0, "row": {}}) + "\n")
    code, out, err = _main([x.format(a=a, tmp=tmp_path) for x in args], capsys)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert says in err


def test_median_of_repeats_is_the_reports(tmp_path):
    """The CSV's sec_per_epoch_median is the figure the report's table shows."""
    from common.reports import runs
    r = _record(repeats=[(1.0, 3.0), (2.0, 2.0), (4.0, 4.0)])
    (row,) = export.rows([r])
    assert row["sec_per_epoch_median"] == runs.summarize([r])[0]["sec/epoch"] == statistics.median([2.0, 2.0, 4.0])


# --- every exported column against its source ---

# Values that the report reads to make its rows (the row's key, speed-up and timing) stay
# what a run writes; every other record key gets a string of its own name, and every
# number below is one no other column holds, so a column that reads the wrong field (the
# median evaluation time holding the last train loss, issue 31) cannot match by chance.
REAL = ("framework", "model", "mode", "devices", "batch_size", "nodes", "status",
        "sec_per_epoch", "steps_per_epoch", "eval_sec", "train_loss", "stage_sec", "repeats",
        "repeat_planned", "env", "trace")
DISTINCT_ENV = {"cpu_model": "CPU Z", "cpu_count": 16, "gpu_model": "GPU Q", "python": "3.11.9",
                "libraries": {"numpy": "1.26.4"}, "commit": "abc123-dirty",
                "cpu_vector_extensions": "AVX2 (avx2 fma)",
                "kernel_path_env": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}}
# the derived columns worked out by hand from _distinct_records (a new column fails the
# test until its value is written here)
DERIVED_WANT = {
    "sec_per_epoch_median": 5.0,            # the repeats' medians 3.0, 5.0, 6.0
    "sec_per_epoch_spread": 0.6,            # (6.0 - 3.0) / 5.0
    "samples_per_sec_median": 89.6,         # 7 steps x 64 images / 5.0 s
    "repeats_ok": 3, "epochs_timed": 2,
    "steps_per_epoch_median": 7.0,          # 5, 9
    "eval_sec_median": 0.5, "train_loss_last": 1.25,
    "speedup": 1.5,                         # 89.6 over the 1-device row's 7 x 64 / 7.5
    "efficiency": 0.375,                    # 1.5 over 4 devices with cores of their own
    "stage_sec_max": 0.625,
    "cpu_model": "CPU Z", "cpu_count": 16, "cpu_vector_extensions": "AVX2 (avx2 fma)",
    "kernel_path_env": "ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2",
    "gpu_model": "GPU Q", "python_version": "3.11.9", "numpy_version": "1.26.4",
    "commit": "abc123-dirty", "settings": "tf32+cudnn-benchmark",
    "mode_label": "scratch sync-bn tuned (tf32+cudnn-benchmark)", "slurm_job": "42:n[0-1]",
    "trace_file": "x.trace.json",
}


def _distinct_records() -> list[dict]:
    """A 4-device record whose every exported column holds its own value, and the
    1-device record of the same configuration that its speed-up is against."""
    one = _record(secs=(7.5,), execution="execution-value", sync_bn="sync_bn-value",
                  settings=["tf32", "cudnn-benchmark"])
    one["steps_per_epoch"] = [7]
    four = _record(devices=4, secs=(2.0, 4.0), repeats=[(3.0,), (5.0,), (6.0,)])
    for rep in four["repeats"]:
        rep["steps_per_epoch"] = [7]
    four.update({k: f"{k}-value" for k in export.RECORD_COLUMNS if k not in REAL})
    four.update(steps_per_epoch=[5, 9], eval_sec=[0.25, 0.75, 0.5], train_loss=[2.25, 1.25],
                stage_sec=[0.125, 0.625], repeat_planned=6, env=DISTINCT_ENV,
                trace={"file": "x.trace.json"}, cores_per_device="cores_per_device-value",
                settings=["tf32", "cudnn-benchmark"], slurm={"job_id": 42, "node_list": "n[0-1]"})
    return [one, four]


def check_exported(csv_text: str, json_rows: list[dict], record: dict) -> None:
    """The record's row in both formats: every record column its own key's value, every
    derived one the hand-worked figure, and no column left unasserted."""
    want = {**{k: record[k] for k in export.RECORD_COLUMNS}, **DERIVED_WANT}
    assert list(want) == list(export.COLUMNS), "a column without its expected value here"
    same = [(a, b) for i, a in enumerate(want) for b in list(want)[i + 1:] if want[a] == want[b]]
    assert not same, f"columns that share a value (or none) cannot tell a swap: {same}"
    (got_csv,) = [r for r in csv.DictReader(io.StringIO(csv_text)) if r["devices"] == "4"]
    (got_json,) = [r for r in json_rows if r["devices"] == 4]
    for k, v in want.items():
        if isinstance(v, float):
            assert float(got_csv[k]) == pytest.approx(v) and got_json[k] == pytest.approx(v), k
        else:
            assert got_csv[k] == ("" if v is None else str(v)) and got_json[k] == v, k


def _export_both(tmp_path, capsys, records):
    folder = _folder(tmp_path / "d", records)
    code, out, _ = _main([folder, "--format", "csv"], capsys)
    code_json, json_out, _ = _main([folder, "--format", "json"], capsys)
    assert code == code_json == 0
    return out, json.loads(json_out)


def test_every_exported_column_holds_its_own_value(tmp_path, capsys):
    records = _distinct_records()
    check_exported(*_export_both(tmp_path, capsys, records), records[1])


def _eval_holds_last_loss(monkeypatch):
    monkeypatch.setitem(export.DERIVED, "eval_sec_median", export.DERIVED["train_loss_last"])


def _lr_holds_seed(monkeypatch):
    rows = export.rows
    monkeypatch.setattr(export, "rows", lambda records: [{**row, "lr": row["seed"]}
                                                         for row in rows(records)])


def _a_new_column(monkeypatch):
    monkeypatch.setitem(export.DERIVED, "a_new_column", ("new", lambda r, t, row: 0.0))
    monkeypatch.setattr(export, "COLUMNS", (*export.COLUMNS, "a_new_column"))


@pytest.mark.parametrize("plant, says", [(_eval_holds_last_loss, "^eval_sec_median\n"),
                                         (_lr_holds_seed, "^lr\n"),
                                         (_a_new_column, "without its expected value")],
                         ids=["eval-holds-loss", "lr-holds-seed", "new-column"])
def test_a_column_holding_another_field_fails(tmp_path, capsys, monkeypatch, plant, says):
    records = _distinct_records()
    plant(monkeypatch)
    with pytest.raises(AssertionError, match=says):                     # seen failing
        check_exported(*_export_both(tmp_path, capsys, records), records[1])


def test_a_note_a_user_copies_is_never_cut(tmp_path, capsys, monkeypatch):
    """A not-installed row's note ends in the command that installs it (MXNet's builds
    an environment of its own: over 160 characters, more with a deep checkout, whose path
    the note names: CI's /check/work/main once wrapped it inside report.md's table cell):
    whole in the terminal's notes and in report.md."""
    from common.facts import registry
    from common.reports import runs
    monkeypatch.setattr(registry, "python", lambda name: "/check/" + "a-deep-folder/" * 12 + "bin/python")
    why = registry.not_installed("mxnet")
    assert len(why) > 160 and why.endswith(registry.install_hint("mxnet"))
    rows = runs.summarize([_record(framework="mxnet", status="not-installed", error=why)])
    assert rows[0]["note"] == why
    assert any(line.endswith(why) for line in runs.notes(rows))
    folder = _folder(tmp_path / "a", [_record(framework="mxnet", status="not-installed", error=why)])
    assert report.main([str(folder)]) == 0
    assert registry.install_hint("mxnet") in (folder / "report.md").read_text()


def test_the_split_table_sets_each_mode_beside_its_own_formula():
    """report.md's table of the modes that split one model: held and whole bytes per
    device from the record, bytes sent beside each mode's formula (sharded gathered once,
    fsdp ZeRO-3's regather, tensor and tp four all-reduces of the activations per block);
    a data-parallel row has no place in it."""
    from common import models
    from common.core import perf
    from common.reports import runs, splits
    vit = models.get("vit")
    sharded = _record(mode="sharded", devices=2, shard_bytes=[600, 400], param_bytes=1000,
                      sent_bytes_per_step=[1000, 1000])
    fsdp = _record(mode="fsdp", devices=4, shard_bytes=[250] * 4, param_bytes=1000)
    tensor = _record(mode="tensor", devices=2, model="vit", shard_bytes=[700, 700],
                     replicated_bytes=400, param_bytes=1000, sent_bytes_per_step=[5e6, 5e6])
    native = _record(mode="native", devices=2)
    got = splits.rows([sharded, fsdp, tensor, native])
    assert [r["mode"] for r in got] == ["sharded", "fsdp", "tensor"]
    assert [r["formula MB/step/dev"] * splits.MB for r in got] == pytest.approx(
        [perf.ring_bytes(1000, 2), 3 * 3 / 4 * 1000,
         4 * vit.SIZE["blocks"] * perf.ring_bytes(4 * 64 * vit.TOKENS * vit.SIZE["width"], 2)])
    assert got[0]["held MB/dev"] == 600 / splits.MB and got[2]["whole MB/dev"] == 400 / splits.MB
    assert got[1]["sent MB/step/dev"] is None          # FSDP2's bytes are not counted
    text = runs.markdown_report(runs.summarize([tensor, native]), [tensor, native], "cmd")
    assert "## One model split over the devices" in text
    assert "## One model split" not in runs.markdown_report(runs.summarize([native]), [native], "cmd")


def test_the_split_tables_gradient_column_shows_where_a_record_has_its_gradients():
    """grads MB/dev, the most any device holds of its gradients (grad_bytes), is a column
    where some row has it ('-' in the others) and none where no record has it (records
    written before it: a committed page's table unchanged)."""
    from common.reports import splits
    old = _record(mode="sharded", devices=2, shard_bytes=[600, 400], param_bytes=1000)
    new = {**old, "grad_bytes": [600, 400]}
    for records, shown in (([old], False), ([old, new], True)):
        rows = splits.rows(records)
        header = splits.table(rows, markdown=True).columns
        assert ("grads MB/dev" in [c.header for c in header]) is shown
        assert ("grads MB/dev:" in splits.definitions(rows)[0]) is shown
    assert [r["grads MB/dev"] for r in splits.rows([old, new])] == [None, 600 / splits.MB]
