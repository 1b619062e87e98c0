"""Keras's backends side by side (frameworks/keras/backends): one module per backend with
the same names in each, and no other file of frameworks/keras compares the backend's
name or asks Keras which backend runs. Read from the source (AST), so that every
backend's module is checked without its framework installed."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.conftest import name_uses, planted_uses

ROOT = Path(__file__).resolve().parent.parent
KERAS = ROOT / "frameworks" / "keras"
BACKENDS = KERAS / "backends"
NAMES = {"tensorflow", "jax", "torch"}
# what every backend module holds (frameworks/keras/backends/__init__.py says what each is)
INTERFACE = {"Devices", "Profiler", "SYNC_BN", "tf", "grads_of_loss_sum", "refuse",
             "placement", "laid_out", "compiled"}


def top_level_names(source: str) -> set[str]:
    """The names a module binds at its top level: defs, classes, assignments, imports."""
    names = set()
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def backend_modules() -> list[Path]:
    """Every module of backends/ but the choice (__init__) and what the backends share."""
    return sorted(p for p in BACKENDS.glob("*.py") if p.stem not in ("__init__", "arrays"))


def test_there_is_one_module_per_backend():
    assert {p.stem for p in backend_modules()} == NAMES


@pytest.mark.parametrize("path", backend_modules(), ids=lambda p: p.stem)
def test_every_backend_module_holds_the_same_names(path):
    missing = INTERFACE - top_level_names(path.read_text())
    assert not missing, f"{path.relative_to(ROOT)} lacks {sorted(missing)}"


def test_a_backend_module_without_a_name_is_found():
    """Planted: torch's module without its `refuse`."""
    source = (BACKENDS / "torch.py").read_text().replace("def refuse(", "def _refuse(")
    assert INTERFACE - top_level_names(source) == {"refuse"}


def backend_choices(path: Path, source: str | None = None) -> list[str]:
    """`file:line` of every comparison with a backend's name, and of every call that asks
    Keras which backend runs (keras.config.backend())."""
    text = source if source is not None else path.read_text()
    found = name_uses(path, NAMES, text)
    for node in ast.walk(ast.parse(text)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "backend" and ast.unparse(node.func.value).endswith("config")):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_no_keras_file_but_the_backends_picks_a_backend():
    found = [hit for p in sorted(KERAS.rglob("*.py"))
             if p.parent != BACKENDS for hit in backend_choices(p)]
    assert not found, f"a Keras backend chosen outside frameworks/keras/backends: {found}"


@pytest.mark.parametrize("module, line, planted", [
    ("frameworks/keras/native.py", "        current.compiled(self.model, execution)",
     '        if keras.config.backend() == "torch":\n            pass'),
    ("frameworks/keras/models.py", "    sync_bn = sync_bn and current.SYNC_BN",
     '    sync_bn = sync_bn and BACKEND == "tensorflow"'),
    ("frameworks/keras/pipeline.py", "Pipeline = NoPipeline if current.tf is None else TensorFlowStages",
     'Pipeline = TensorFlowStages if BACKEND in ("tensorflow",) else NoPipeline'),
], ids=["asks-keras", "compares", "in-a-tuple"])
def test_a_planted_backend_choice_is_found(module, line, planted):
    """The branches this layout moved into the backend modules, planted back."""
    assert planted_uses(backend_choices, module, line, planted), module
