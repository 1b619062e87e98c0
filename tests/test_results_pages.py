"""A results page's tables are its committed records: each page's report, rebuilt from
the records beside it, has every table row on the page (no figure typed by hand, none
stale)."""
from pathlib import Path

import pytest

from common.reports import runs as report
from common.results.record import load_records

RESULTS = Path(__file__).resolve().parent.parent / "docs" / "results"
# page -> the folders of compare records its tables come from
COMPARE_PAGES = {"h100-default.md": ("h100-default/lenet", "h100-default/resnet18")}


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
                 "cpu-2core-bf16": ("cpu-2core-bf16/profile-keras-jax",)}


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


@pytest.mark.parametrize("kind_file", sorted(p.name for p in (RESULTS / "settings").glob("*.json")))
def test_a_machine_kinds_settings_file_is_its_runs_merged(kind_file):
    """docs/results/settings/<kind>.json, what compare --settings best applies, is every
    committed run of that kind merged (benchmarks.settings --best-file): no best typed or
    left over by hand."""
    import json

    from benchmarks import settings as command
    runs = [r for page in SETTINGS_PAGES.values() for r in map(_judged, page)
            if f"{r['machine_kind']}.json" == kind_file]
    assert runs, f"{kind_file}: no committed settings run of its kind"
    assert json.loads((RESULTS / "settings" / kind_file).read_text()) == command.merged(runs)
