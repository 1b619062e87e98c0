"""docs/testing.md's map from each module of common/ to the test files that test it, held
to the tree: every module is in it, every test file it names exists and reaches the
module, by name (in the file or in a helper program it runs, tests/helpers/) or through a
module or command it names that imports it."""
from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTING = ROOT / "docs" / "testing.md"
HEADING = "## Where each module is tested"


def modules() -> list[str]:
    return [str(p.relative_to(ROOT)) for p in sorted((ROOT / "common").glob("*/*.py"))
            if p.name != "__init__.py"]


def dotted(path: str) -> str:
    return path.removesuffix(".py").replace("/", ".")


@cache
def imports_of(module: str) -> frozenset[str]:
    """The common.* modules a module (dotted) imports."""
    path = ROOT / (module.replace(".", "/") + ".py")
    if not path.is_file():
        return frozenset()
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            out |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
    return frozenset(m for m in out if m.startswith("common."))


@cache
def reached(test_file: str) -> frozenset[str]:
    """The modules a test file reaches: those it (or a helper it runs) names, and what
    each module or command it names imports."""
    text = (ROOT / "tests" / test_file).read_text()
    for helper in re.findall(r"tests\.helpers(?:\.| import )(\w+)", text):
        text += (ROOT / "tests" / "helpers" / f"{helper}.py").read_text()
    named = set(re.findall(r"\b((?:common|benchmarks)\.[\w.]+)", text))
    for package, names in re.findall(r"from ((?:common|benchmarks)[\w.]*) import ([^\n]+)", text):
        named |= {f"{package}.{n.strip(' ()')}" for n in re.split(r",| as \w+", names)}
    named |= {dotted(p) for p in re.findall(r"\bcommon/\w+/\w+\.py", text)}
    return frozenset(named | {m for n in named for m in imports_of(n)})


def the_map(text: str) -> dict[str, list[str]]:
    section = text[text.index(HEADING):]
    section = section[:section.find("\n## ", 1)] if "\n## " in section[1:] else section
    rows = {}
    for line in section.splitlines():
        m = re.match(r"\| `(common/[\w/]+\.py)` \| (.+) \|$", line)
        if m:
            rows[m.group(1)] = re.findall(r"`(test_\w+\.py)`", m.group(2))
    return rows


def map_gaps(text: str) -> list[str]:
    rows = the_map(text)
    gaps = [f"{m}: not in the map" for m in modules() if m not in rows]
    for module, tests in rows.items():
        if not tests:
            gaps.append(f"{module}: no test file named")
        for t in tests:
            if not (ROOT / "tests" / t).is_file():
                gaps.append(f"{module}: {t} does not exist")
            elif dotted(module) not in reached(t):
                gaps.append(f"{module}: {t} does not reach it")
    return gaps


def test_the_module_map_is_the_tree():
    assert map_gaps(TESTING.read_text()) == []


def test_a_wrong_map_fails_its_check():
    """Planted: a module left out, a test file that does not exist, one that never
    reaches the module it is named for."""
    text = TESTING.read_text()
    row = next(l for l in text.splitlines() if l.startswith("| `common/core/loop.py` |"))
    assert "common/core/loop.py: not in the map" in map_gaps(text.replace(row + "\n", ""))
    assert "common/core/loop.py: test_lop.py does not exist" in map_gaps(
        text.replace(row, "| `common/core/loop.py` | `test_lop.py` |"))
    assert "common/core/loop.py: test_verdict.py does not reach it" in map_gaps(
        text.replace(row, "| `common/core/loop.py` | `test_verdict.py` |"))
