"""The architecture is checked, not only written down: import-linter's contracts in
pyproject.toml (common/ in layers, common importing no framework package or entry
point, framework packages independent, commands independent) hold for the tree, and fail when an upward
import is planted."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LINT = Path(sys.executable).with_name("lint-imports")


def lint(root: Path) -> subprocess.CompletedProcess:
    if not LINT.exists():
        pytest.fail(f"{LINT} is missing: install the test extra (pip install -e '.[test]')")
    return subprocess.run([str(LINT), "--no-cache", "--config", str(root / "pyproject.toml")],
                          cwd=root, capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"})


def test_the_layers_hold():
    out = lint(ROOT)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "0 broken" in out.stdout


@pytest.mark.parametrize("module, planted", [
    # the bottom layer importing the training core
    ("common/facts/data.py", "import common.core.loop"),
    # the core importing the launchers above it
    ("common/core/modes.py", "from common.launch import run"),
    # common importing a framework package (frameworks load on demand, by name)
    ("common/results/record.py", "import frameworks.pytorch"),
    # a command importing another (compare took --settings' parsing from the settings
    # command, and profile too: issue 50)
    ("benchmarks/compare.py", "from benchmarks import settings"),
], ids=["facts->core", "core->launch", "common->frameworks", "command->command"])
def test_a_planted_upward_import_breaks_a_contract(tmp_path, module, planted):
    for part in ("common", "frameworks", "benchmarks"):
        shutil.copytree(ROOT / part, tmp_path / part,
                        ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    target = tmp_path / module
    target.write_text(target.read_text() + f"\n{planted}\n")
    out = lint(tmp_path)
    assert out.returncode != 0 and "BROKEN" in out.stdout, out.stdout[-2000:]

