"""README's measured figures are its results page's: the table of `make compare`'s rows,
the comparison's wall time, date and CPU peak, and the accuracy range, each read from
docs/results/cpu-2core-default.md (itself its run's report.md), so that the front page
cannot drift from the page it cites."""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGE = ROOT / "docs" / "results" / "cpu-2core-default.md"
# README's figures that the page must hold verbatim: times, dates, rates
VERBATIM = (r"\d+ min \d+ s", r"\d{4}-\d\d-\d\d", r"\d+\.\d+ GFLOP/s")


def tables(text: str) -> list[list[dict]]:
    """Every Markdown table of a text, as rows of {header: cell}."""
    out, block = [], []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            block.append([c.strip() for c in line.strip().strip("|").split("|")])
        elif block:
            header, *rows = [r for r in block if not set("".join(r)) <= set("-: ")]
            out.append([dict(zip(header, r)) for r in rows])
            block = []
    return out


def _section(text: str, start: str, end: str) -> str:
    return text[text.index(start):text.index(end, text.index(start))]


def _key(row: dict) -> tuple:
    return row["framework"], row["mode"], row["execution"]


def check(readme: str, page: str) -> list[str]:
    """Where README's figures differ from the page's (empty: none)."""
    problems = []
    shown = _section(readme, "## Quick start", "## Commands")
    page_tables = tables(page)
    main = {_key(r): r for r in page_tables[0]}
    util = {_key(r): r for t in page_tables[1:] if t and "MFU" in t[0] for r in t}
    (readme_table,) = [t for t in tables(shown) if t and "sec/epoch" in t[0]]
    for row in readme_table:
        theirs = {**util.get(_key(row), {}), **main.get(_key(row), {})}
        if not theirs:
            problems.append(f"README's row {_key(row)} is not on the page")
        for col, cell in row.items():
            if col in theirs and theirs[col] != cell:
                problems.append(f"{_key(row)} {col}: README {cell}, the page {theirs[col]}")
    for pattern in VERBATIM:
        problems += [f"README's {m!r} is not on the page" for m in re.findall(pattern, shown)
                     if m not in page]
    accuracies = [float(r["test acc"]) for r in main.values() if r["status"] == "ok"]
    said = re.search(r"accuracy (0\.\d\d)-(0\.\d\d)", shown)
    want = f"{min(accuracies):.2f}-{max(accuracies):.2f}"
    if not said or f"{said.group(1)}-{said.group(2)}" != want:
        problems.append(f"README's accuracy range is not the page's {want}")
    return problems


def test_readmes_figures_are_its_results_pages():
    assert check(README.read_text(), PAGE.read_text()) == []


def test_a_figure_typed_by_hand_fails_the_check():
    readme, page = README.read_text(), PAGE.read_text()
    row = next(line for line in readme.splitlines() if line.startswith("| tensorflow | scratch"))
    cells = row.split("|")
    cells[6] = f" {float(cells[6]) + 0.01:.2f} "                  # sec/epoch
    planted = readme.replace(row, "|".join(cells))
    assert any("sec/epoch" in p for p in check(planted, page))
    minutes = re.search(r"\d+ min \d+ s", readme).group(0)
    assert any("not on the page" in p for p in check(readme.replace(minutes, "7 min 1 s"), page))
    said = re.search(r"accuracy 0\.\d\d-(0\.\d\d)", readme)
    bumped = said.group(0)[:-2] + f"{int(said.group(1)[2:]) + 1:02d}"
    assert any("accuracy range" in p for p in check(readme.replace(said.group(0), bumped), page))


LAYOUT = ROOT / "docs" / "layout.md"
KERAS_BACKENDS = ROOT / "frameworks" / "keras" / "backends"


def layout_gaps(layout: str) -> list[str]:
    """The tree's modules that docs/layout.md does not name where they live: each file
    of common/<package>/ in its package's rows of the common/ table, each benchmarks/
    module in the benchmarks/ section, each framework package file in its table (and the
    heading's count of them)."""
    import frameworks
    gaps = []
    common = _section(layout, "## `common/`", "## `frameworks/")
    rows, package = {}, None
    for line in common.splitlines():
        if line.startswith("| `"):
            package = line.split("|")[1].strip().strip("`").rstrip("/")
        if line.startswith("| ") and package:
            rows[package] = rows.get(package, "") + line
    for path in sorted((ROOT / "common").glob("*/*.py")):
        if path.name != "__init__.py" and f"`{path.name}`" not in rows.get(path.parent.name, ""):
            gaps.append(f"common/{path.parent.name}/{path.name}")
    bench = _section(layout, "## `benchmarks/`", "## The layers")
    gaps += [f"benchmarks/{p.name}" for p in sorted((ROOT / "benchmarks").glob("*.py"))
             if p.name != "__init__.py" and f"`{p.stem}`" not in bench and f"`{p.name}`" not in bench]
    fw = _section(layout, "## `frameworks/", "Keras has no scratch loop")
    gaps += [f"frameworks/<name>/{f}" for f in frameworks.FILES if f"`{f}`" not in fw]
    if f"the same {len(frameworks.FILES)} files each" not in fw:
        gaps.append(f"the frameworks heading's count (the packages have {len(frameworks.FILES)} files)")
    keras = _section(layout, "Keras has no scratch loop", "## `benchmarks/`")
    gaps += [f"frameworks/keras/backends/{p.name}" for p in sorted(KERAS_BACKENDS.glob("*.py"))
             if f"`{p.name}`" not in keras]
    return gaps


def test_the_layout_page_names_every_module_where_it_lives():
    assert layout_gaps(LAYOUT.read_text()) == []


def test_a_module_left_out_of_the_layout_fails_it():
    text = LAYOUT.read_text()
    assert "common/results/trace.py" in layout_gaps(text.replace("`trace.py`", "`trace`"))
    assert "benchmarks/links.py" in layout_gaps(text.replace("`links`", "links"))


def how_to_add_gaps(readme: str) -> list[str]:
    """What README's "How to add" gets wrong about the tree: a package of common/ it does
    not name, a framework package file it leaves out or miscounts, the Keras backends'
    folder, a registry it sends a reader to that has no such table, a path that is not
    there."""
    import frameworks
    section = _section(readme, "## How to add", "## More")
    gaps = [f"common/{p.name}/" for p in sorted((ROOT / "common").iterdir())
            if (p / "__init__.py").exists() and f"`common/{p.name}/`" not in section]
    bullet = section[section.index("- `frameworks/<name>/`"):]
    bullet = bullet[:bullet.index("\n\n")]
    gaps += [f"frameworks/<name>/{f}" for f in frameworks.FILES if f"`{f}`" not in bullet]
    gaps += [f"the count of framework files ({len(frameworks.FILES)})"
             for said in re.findall(r"the (?:same )?(\d+) files", section)
             if int(said) != len(frameworks.FILES)]
    if "`frameworks/keras/backends/`" not in section:
        gaps.append("frameworks/keras/backends/")
    for table, module in re.findall(r"row in `(\w+)` \(`([\w/]+\.py)`\)", section):
        if not re.search(rf"^{table}\b.*=", (ROOT / module).read_text(), re.M):
            gaps.append(f"{table} in {module}")
    gaps += [path for path in re.findall(r"`((?:common|frameworks)/[\w/]+(?:\.py|/))`", section)
             if not (ROOT / path).exists()]
    return gaps


def test_readme_s_how_to_add_names_the_tree_as_it_is():
    assert how_to_add_gaps(README.read_text()) == []


@pytest.mark.parametrize("old, new, gap", [
    ("the same 9 files", "the same 8 files", "the count of framework files"),
    ("`scopes.py`, `profile.py`", "`scopes.py`", "frameworks/<name>/profile.py"),
    ("`native.py`, `pipeline.py`, `ops.py`", "`native.py`, `ops.py`", "frameworks/<name>/pipeline.py"),
    ("`frameworks/keras/backends/`", "its backends", "frameworks/keras/backends/"),
    ("`common/launch/`", "`common/launching/`", "common/launch/"),
    ("row in `ENGINES`", "row in `STARTERS`", "STARTERS in common/launch/engines.py"),
], ids=["count", "file", "file-named-elsewhere", "keras", "package", "registry"])
def test_a_wrong_how_to_add_fails_its_check(old, new, gap):
    text = README.read_text()
    assert old in text, old
    assert any(g.startswith(gap) for g in how_to_add_gaps(text.replace(old, new))), gap


def test_a_keras_backend_left_out_of_the_layout_fails_it():
    text = LAYOUT.read_text()
    assert "frameworks/keras/backends/jax.py" in layout_gaps(text.replace("`jax.py`", "jax"))
