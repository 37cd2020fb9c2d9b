"""How a number is written in a table cell, the same in the summary, the report and the
finals table."""

from __future__ import annotations


def fmt(value: object) -> str:
    """A table cell: empty for None, 4 significant digits for a float."""
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)
