"""What every zoo builder returns, and helpers they share."""

from __future__ import annotations

import numbers
from typing import Any

from nas.graph.block import Block
from nas.graph.ops import Graph

ModelParts = tuple[Graph, dict[str, Any], list[Block]]


def factor(base: str, mul: int = 1, div: int = 1) -> str:
    """A symbolic width: `factor("S:-1", mul=2)` -> `"S:-1*2"`, `div=4` -> `"S:-1%4"`."""
    return base + (f"%{div}" if div > 1 else "") + (f"*{mul}" if mul > 1 else "")


def positive_int(name: str, value: Any) -> int:
    """A builder argument that is a size: an int >= 1. Sizes reach the graph as `K:`
    constants, which are only checked when the graph runs, so they are checked here."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be positive: an int >= 1, got {value!r}")
    return int(value)
