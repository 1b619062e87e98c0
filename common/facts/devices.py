"""The neutral device vocabulary: "cpu:0", "gpu:1". Frameworks translate at their edge."""
from __future__ import annotations

KINDS = ("cpu", "gpu")


def parse(device: str) -> tuple[str, int]:
    """'gpu:1' -> ('gpu', 1); bad names raise ValueError with the expected form."""
    kind, _, index = str(device).partition(":")
    if kind not in KINDS or not index.isdigit():
        raise ValueError(f"bad device name {device!r}; expected 'cpu:N' or 'gpu:N'")
    return kind, int(index)


def name(kind: str, index: int) -> str:
    return f"{kind}:{index}"
