"""How the pages show a figure, written once: seconds as milliseconds (each page picks
the precision its figures need), "-" where a figure is missing."""
from __future__ import annotations


def ms(seconds: float | None, spec: str = ".0f") -> str:
    """Seconds as milliseconds in the format spec `spec`; "-" for none."""
    return "-" if seconds is None else format(seconds * 1e3, spec)
