"""Framework names, their packages, and which are installed -- found without importing any."""
from __future__ import annotations

import importlib
import importlib.util

# name -> (our package, the library it needs, pip extra)
FRAMEWORKS: dict[str, tuple[str, str, str]] = {
    "pytorch": ("frameworks.pytorch", "torch", "pytorch"),
    "tensorflow": ("frameworks.tensorflow", "tensorflow", "tensorflow"),
    "mxnet": ("frameworks.mxnet", "mxnet", "mxnet"),
    "paddle": ("frameworks.paddle", "paddle", "paddle"),
    "keras": ("frameworks.keras", "keras", "keras"),
}
NAMES = tuple(FRAMEWORKS)


class UnknownFramework(ValueError):
    pass


class NotInstalled(ImportError):
    pass


def check_name(name: str) -> str:
    if name not in FRAMEWORKS:
        raise UnknownFramework(
            f"unknown framework {name!r}; choose from: {', '.join(NAMES)}")
    return name


def is_installed(name: str) -> bool:
    lib = FRAMEWORKS[check_name(name)][1]
    if name == "keras":  # Keras 3 runs here on its TensorFlow backend
        return all(importlib.util.find_spec(m) is not None for m in ("keras", "tensorflow"))
    return importlib.util.find_spec(lib) is not None


def installed() -> list[str]:
    return [n for n in NAMES if is_installed(n)]


def install_hint(name: str) -> str:
    """The command that installs a framework's extra, e.g. pip install -e '.[paddle]'."""
    return f"pip install -e '.[{FRAMEWORKS[check_name(name)][2]}]'"


def get(name: str):
    """Import one framework package on demand and return its backend instance."""
    module, lib, _ = FRAMEWORKS[check_name(name)]
    if not is_installed(name):
        raise NotInstalled(
            f"framework {name!r} is not installed (needs {lib!r}); "
            f"install it with: {install_hint(name)}")
    return importlib.import_module(module).BACKEND

# Modes a framework cannot do, with the reason. Checked both ways by the tests:
# each listed gap must still raise NotApplicable, and no unlisted one may.
KNOWN_GAPS: dict[tuple[str, str], str] = {
    ("keras", "scratch"): "Keras has no from-scratch training loop of its own: its "
                          "data parallelism is model.fit under a distribution strategy",
}
