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
