"""A results page's tables are its committed records: each page's report, rebuilt from
the records beside it, has every table row on the page (no figure typed by hand, none
stale)."""
import math
from pathlib import Path

import pytest

from common.reports import runs as report, splits
from common.results.record import load_records

RESULTS = Path(__file__).resolve().parent.parent / "docs" / "results"
# page -> the folders of compare records its tables come from
COMPARE_PAGES = {"h100-default.md": ("h100-default/lenet", "h100-default/resnet18"),
                 "cpu-2core-vit-default.md": ("cpu-2core-vit-default/vit",),
                 "cpu-2core-vit-splits.md": ("cpu-2core-vit-splits/vit",),
                 "cpu-2core-vit-splits-amd-avx512.md": ("cpu-2core-vit-splits-amd-avx512/vit",),
                 "cpu-2core-vit-sizes.md": tuple(f"cpu-2core-vit-sizes/{m}" for m in
                                                 ("vit", "vit_w128", "vit_p4", "vit_p4w128"))}


def rebuilt_rows(folder: Path) -> list[str]:
    records = load_records(folder)
    command = (folder / "command.txt").read_text().strip()
    md = report.markdown_report(report.summarize(records), records, command)
    return [line for line in md.splitlines() if line.startswith("| ")]


@pytest.mark.parametrize("page", sorted(COMPARE_PAGES))
def test_a_compare_page_is_its_records(page):
    text = (RESULTS / page).read_text().splitlines()
    for folder in COMPARE_PAGES[page]:
        rows = rebuilt_rows(RESULTS / folder)
        assert len(rows) > 5, f"{folder}: {len(rows)} table rows rebuilt"
        missing = [r for r in rows if r not in text]
        assert not missing, f"{page} differs from its records in {folder}: {missing[:2]}"


# The split pages of two machine kinds (issue 52): the same command's bytes, which follow
# from the shapes alone, whatever the CPU (times and memory peaks do not)
SPLIT_KINDS = ("cpu-2core-vit-splits/vit", "cpu-2core-vit-splits-amd-avx512/vit")
SPLIT_BYTES = ("model MB", "held MB/dev", "whole MB/dev", "grads MB/dev", "sent MB/step/dev",
               "formula MB/step/dev", "compiled collectives MB")


# figures the Xeon's records were written before (read since): compared where both have them
NEWER = ("grads MB/dev",)


def split_bytes_differences(a: list[dict], b: list[dict]) -> list[str]:
    """Where two runs' split rows (common/reports/splits.py) hold other bytes, or a figure
    one side lacks (but NEWER's, which older records lack); and rows on one side only."""
    def keyed(records):
        return {(r["framework"], r["mode"], r["devices"]): r for r in splits.rows(records)}
    ka, kb = keyed(a), keyed(b)
    out = [f"{k}: on one side only" for k in sorted(set(ka) ^ set(kb))]
    for k in sorted(set(ka) & set(kb)):
        out += [f"{k} {c}: {ka[k][c]} against {kb[k][c]}" for c in SPLIT_BYTES
                if ka[k][c] != kb[k][c] and not (c in NEWER and None in (ka[k][c], kb[k][c]))]
    return out


def test_a_splits_bytes_are_the_same_on_every_machine_kind():
    """The split pages of the Xeon and the EPYC (one command): every byte figure of every
    row the same, since bytes follow from the shapes and collectives, not the CPU.
    Planted: one device's shard a parameter larger; one framework's rows left out; a byte
    figure dropped from one side."""
    intel, amd = (load_records(RESULTS / f) for f in SPLIT_KINDS)
    assert len(splits.rows(amd)) == 35
    assert split_bytes_differences(intel, amd) == []
    # seen failing: one device's shard a parameter larger, one row left out
    planted = [dict(r, shard_bytes=[r["shard_bytes"][0] + 4, *r["shard_bytes"][1:]])
               if (r["framework"], r["mode"], r.get("devices")) == ("paddle", "tensor", 2) else r
               for r in amd]
    assert len(split_bytes_differences(intel, planted)) == 1
    assert len(split_bytes_differences(intel, [r for r in amd if r["framework"] != "mxnet"])) == 4
    dropped = [{k: v for k, v in r.items() if k != "sent_bytes_per_step"}
               if (r["framework"], r["mode"], r.get("devices")) == ("mxnet", "sharded", 2) else r for r in amd]
    assert len(split_bytes_differences(intel, dropped)) == 1


# The ViT learns alike in every framework (issue 51): after the default compare's 2 epochs
# of Fashion-MNIST every row's test accuracy is above FLOOR and within BAND of the others'.
# Measured (docs/results/cpu-2core-vit-default.md, Intel Xeon with AVX-512 and AMX): 13 rows
# at 0.7598-0.7601, each 0.751-0.752 after its first epoch, where LeNet's rows under the
# same command span 0.764-0.785 (cpu-2core-default.md: its steps at lr 0.2 amplify
# rounding). The band leaves rounding room on other CPU kinds, 30x the span measured here;
# the floor fails a row that learned less than the others by 0.02.
VIT_LEARNING = {"floor": 0.74, "band": 0.01}


def learning_problems(records: list[dict], floor: float, band: float) -> list[str]:
    ok = [r for r in records if r["status"] == "ok"]
    accs = {f"{r['framework']} {r['mode']}": r["test_accuracy"] for r in ok}
    out = [f"{k}: test accuracy {a:.4f} under the floor {floor}" for k, a in accs.items() if a < floor]
    if accs and max(accs.values()) - min(accs.values()) > band:
        out.append(f"test accuracies span {min(accs.values()):.4f}-{max(accs.values()):.4f}, "
                   f"more than {band}")
    return out


def test_every_frameworks_vit_learns_alike():
    records = load_records(RESULTS / "cpu-2core-vit-default" / "vit")
    assert len([r for r in records if r["status"] == "ok"]) == 13
    assert learning_problems(records, **VIT_LEARNING) == []
    stuck = [dict(r, test_accuracy=0.1) if r["framework"] == "paddle" else r for r in records]
    assert len(learning_problems(stuck, **VIT_LEARNING)) == 3     # seen failing: floor x2, band


def _rows(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("| ")]


def _missing(rows: list[str], page: str) -> list[str]:
    text = (RESULTS / page).read_text().splitlines()
    assert len(rows) > 5, f"{len(rows)} table rows rebuilt for {page}"
    return [r for r in rows if r not in text]


# page -> the profile folders it shows (a folder's subfolders: one run each, e.g. one
# framework at two versions)
PROFILE_PAGES = {"h100-profile": ("h100-profile",), "cpu-2core-profile": ("cpu-2core-profile",),
                 "cpu-2core-jax-versions-profile": ("cpu-2core-jax-versions-profile/1",
                                                    "cpu-2core-jax-versions-profile/2"),
                 "cpu-2core-best": ("cpu-2core-best/profile",),
                 "cpu-2core-best-resnet18": ("cpu-2core-best/profile-resnet18",),
                 "cpu-2core-bf16": ("cpu-2core-bf16/profile-keras-jax",),
                 "cpu-2core-vit-best": ("cpu-2core-vit-best/profile",)}


@pytest.mark.parametrize("page", sorted(PROFILE_PAGES))
def test_a_profile_page_is_its_records(tmp_path, capsys, page):
    """A profile page: profile.md rebuilt from each of its folders' records, every table
    row and every gap line on the page."""
    import shutil

    from benchmarks import profile
    for i, folder in enumerate(PROFILE_PAGES[page]):
        copy = tmp_path / str(i)
        shutil.copytree(RESULTS / folder, copy)
        (copy / "profile.md").unlink(missing_ok=True)
        assert profile.write_page(copy) == 0
        capsys.readouterr()
        rebuilt = (copy / "profile.md").read_text()
        gaps = [line for line in rebuilt.splitlines()
                if "per step against" in line or "the fastest row" in line]
        missing = _missing(_rows(rebuilt) + gaps, f"{page}.md")
        assert not missing, f"{folder}: {missing[:2]}"


# page -> its settings runs (a machine kind's settings file is every run of that kind
# merged, in this order)
SETTINGS_PAGES = {
    "h100-settings.md": ("h100-settings/pytorch-lenet", "h100-settings/jax-lenet"),
    "cpu-2core-settings.md": ("cpu-2core-settings/jax-lenet",),
    "cpu-2core-bf16.md": ("cpu-2core-bf16/lenet-native", "cpu-2core-bf16/native-repeat4"),
    "cpu-2core-best.md": ("cpu-2core-best/lenet", "cpu-2core-best/pytorch-native",
                          "cpu-2core-best/mxnet-scratch", "cpu-2core-best/paddle-native"),
    "cpu-2core-links-best.md": ("cpu-2core-links-best/lenet-10mbit",),
    "cpu-2core-best-resnet18.md": ("cpu-2core-best/resnet18", "cpu-2core-best/resnet18-keras-jax",
                                   "cpu-2core-best/resnet18-pytorch-bf16",
                                   "cpu-2core-best/resnet18-bf16"),
    "cpu-2core-vit-best.md": ("cpu-2core-vit-best/vit", "cpu-2core-vit-best/vit-pytorch-compiled"),
}


def _judged(run: str) -> dict:
    import json

    from benchmarks import settings as command
    folder = RESULTS / run
    return command.judged(json.loads((folder / command.DECISIONS).read_text()), folder)


@pytest.mark.parametrize("page_name", sorted(SETTINGS_PAGES))
def test_a_settings_page_is_its_records(page_name):
    """Each run's decisions judged again from its records (benchmarks.settings' rules of
    today) are on the page."""
    from common.reports import settings as page
    rows = []
    for run in SETTINGS_PAGES[page_name]:
        rebuilt = _rows(page.markdown(_judged(run)))
        # each run: a decision and a best row under their headers at least
        assert len(rebuilt) >= 4, f"{run}: {len(rebuilt)} table rows rebuilt"
        rows += rebuilt
    missing = _missing(rows, page_name)
    assert not missing, f"{page_name}: {missing[:2]}"


# A float that a machine recomputes from records is held to the committed one within
# this relative difference: a median of recorded times is exact, but a ratio of geometric
# means goes through np.log and np.exp, whose last bits differ between CPU kinds' SIMD
# paths (issue 49: 0.5562821351413489 on an AMD EPYC with AVX-512 against ...488 on one
# with AVX2 only); far below the 2 decimals the pages show
RECOMPUTED_REL = 1e-9


def differences(committed, rebuilt, where: str = "") -> list[str]:
    """Where two JSON values differ: floats beyond RECOMPUTED_REL, anything else at all."""
    if isinstance(committed, float) or isinstance(rebuilt, float):
        ok = (isinstance(committed, (int, float)) and isinstance(rebuilt, (int, float))
              and math.isclose(committed, rebuilt, rel_tol=RECOMPUTED_REL))
        return [] if ok else [f"{where}: {committed!r} committed, {rebuilt!r} rebuilt"]
    if isinstance(committed, dict) and isinstance(rebuilt, dict):
        return [d for k in dict.fromkeys([*committed, *rebuilt])
                for d in differences(committed.get(k, "(none)"), rebuilt.get(k, "(none)"),
                                     f"{where}.{k}")]
    if isinstance(committed, list) and isinstance(rebuilt, list) and len(committed) == len(rebuilt):
        return [d for i, (a, b) in enumerate(zip(committed, rebuilt))
                for d in differences(a, b, f"{where}[{i}]")]
    return [] if committed == rebuilt else [f"{where}: {committed!r} committed, {rebuilt!r} rebuilt"]


def _kind_runs(kind_file: str) -> list[dict]:
    return [r for page in SETTINGS_PAGES.values() for r in map(_judged, page)
            if f"{r['machine_kind']}.json" == kind_file]


@pytest.mark.parametrize("kind_file", sorted(p.name for p in (RESULTS / "settings").glob("*.json")))
def test_a_machine_kinds_settings_file_is_its_runs_merged(kind_file):
    """docs/results/settings/<kind>.json, what compare --settings best applies, is every
    committed run of that kind merged (benchmarks.settings --best-file): no best typed or
    left over by hand; its recomputed floats within RECOMPUTED_REL."""
    import json

    from common.reports import decisions
    runs = _kind_runs(kind_file)
    assert runs, f"{kind_file}: no committed settings run of its kind"
    committed = json.loads((RESULTS / "settings" / kind_file).read_text())
    assert not differences(committed, decisions.merged(runs))


def test_a_rebuilt_file_is_held_to_what_it_shows_not_its_last_bits():
    """The kind file's comparison lets every float move by its last bits (as another CPU
    kind's kernels move them) and fails on a ratio moved in its 4th decimal, a best or a
    decision changed, a group gone (planted each). The ratios are kept whole, not rounded
    to fewer decimals: rounded twice (to 4, then to the page's 2), 0.9550189 showed 0.95
    instead of 0.96."""
    import copy
    import json

    import numpy as np

    from common.reports import decisions
    kind_file = "amd-epyc-2core-avx512.json"
    committed = json.loads((RESULTS / "settings" / kind_file).read_text())
    assert sum("ratio" in d for g in committed["groups"] for d in g["decisions"]) > 10

    def last_bits(x):
        if isinstance(x, float):
            return float(np.nextafter(np.nextafter(x, np.inf), np.inf))
        if isinstance(x, dict):
            return {k: last_bits(v) for k, v in x.items()}
        return [last_bits(v) for v in x] if isinstance(x, list) else x
    assert not differences(committed, last_bits(committed))
    rebuilt = decisions.merged(_kind_runs(kind_file))
    first = next(d for g in rebuilt["groups"] for d in g["decisions"] if "ratio" in d)
    for plant in (lambda f: first.update(ratio=first["ratio"] + 1e-4),
                  lambda f: f["groups"][0].update(best=["omp-affinity"]),
                  lambda f: first.update(decision="slower"),
                  lambda f: f["groups"].pop()):
        planted = copy.deepcopy(rebuilt)
        first = next(d for g in planted["groups"] for d in g["decisions"] if "ratio" in d)
        plant(planted)
        assert differences(committed, planted), "a planted change passed"


# page -> the benchmarks.vit_defaults folder its tables come from
VIT_DEFAULTS_PAGES = {"cpu-2core-vit-defaults.md": "cpu-2core-vit-defaults"}


def _vit_defaults(folder: str = "cpu-2core-vit-defaults"):
    from common.reports import vit_defaults as report
    return report, *report.load(RESULTS / folder)


@pytest.mark.parametrize("page", sorted(VIT_DEFAULTS_PAGES))
def test_a_vit_defaults_page_is_its_records(page):
    """Every table of the page (the defaults that differ, what each default is, the
    losses, the attention kernels) rebuilt from its folder's records."""
    report, oracle, records = _vit_defaults(VIT_DEFAULTS_PAGES[page])
    missing = _missing(_rows(report.markdown(oracle, records)), page)
    assert not missing, f"{page}: {missing[:2]}"


def test_the_vit_manuals_defaults_are_the_pages():
    """docs/vit.md's table of the defaults that differ is rows of its results page, none
    typed by hand."""
    text = (RESULTS.parent / "vit.md").read_text()
    rows = _rows(text.split("## Defaults that differ", 1)[1].split("\n## ", 1)[0])
    assert len(rows) >= 4, f"{len(rows)} rows in docs/vit.md's table"
    page = (RESULTS / "cpu-2core-vit-defaults.md").read_text().splitlines()
    assert not [r for r in rows if r not in page]


def test_a_default_that_differs_is_told_from_float32_noise():
    """The verdict holds a default's effect against the framework's float32 noise, and
    is seen failing. In the committed records JAX's tanh GELU moves the loss by more than
    100 x its noise (3.2e-4 against 6.1e-7 on the page); planted: the same record with
    the default's run replaced by the choices' run moved by that noise (as if
    jax.nn.gelu computed erf's) reads "within float32 noise". And a loss moved by 1e-5 in
    a record leaves a row that the page does not hold."""
    import copy
    report, oracle, records = _vit_defaults()
    at = next(i for i, r in enumerate(records) if r["framework"] == "jax")
    jax = records[at]
    choice, tanh = jax["losses"][report.CHOICE], jax["losses"]["jax.nn.gelu(x)"]
    noise = report.largest(choice, oracle["losses"])
    assert report.largest(tanh, choice) > 100 * noise
    assert "moves the loss" in report.loss_table(oracle, [jax])[-1]
    planted = copy.deepcopy(jax)
    planted["losses"]["jax.nn.gelu(x)"] = [v + noise for v in choice]
    assert report.loss_table(oracle, [planted])[-1].endswith("| within float32 noise |")
    planted = copy.deepcopy(jax)
    planted["losses"]["jax.nn.gelu(x)"][-1] += 1e-5
    moved = [*records[:at], planted, *records[at + 1:]]
    assert _missing(report.loss_table(oracle, moved), "cpu-2core-vit-defaults.md")


def test_the_paddle_onednn_page_is_its_records():
    """docs/results/cpu-2core-paddle-onednn.md: its table is its probe's committed runs,
    rendered by the probe's own table (docs/results/cpu-2core-paddle-onednn/probe.py)."""
    import importlib.util
    import json
    folder = RESULTS / "cpu-2core-paddle-onednn"
    spec = importlib.util.spec_from_file_location("probe", folder / "probe.py")
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)
    record = json.loads((folder / "runs.json").read_text())
    assert len(record["runs"]) == 9
    missing = _missing(_rows(probe.table(record)), "cpu-2core-paddle-onednn.md")
    assert not missing, missing[:2]
