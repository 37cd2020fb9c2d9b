"""One-line messages shared by both command lines (`nas-train`, `nas-search`)."""

from __future__ import annotations

import re


def unknown_field_line(e: BaseException) -> str:
    """`--config.x.y=v` for a field the config lacks, as one clean line (ml_collections'
    message arrives quoted and escaped, with a suggestion on a second line)."""
    text = str(e.args[0]) if e.args else str(e)
    for _ in range(3):
        text = text.replace("\\\\", "\\").replace("\\'", "'").replace("\\n", "\n")
    lines = [ln.strip().strip("'\"\\") for ln in text.splitlines() if ln.strip()]
    name = lines[0] if lines else "?"
    hint = re.search(r'Did you mean "([^"]+)"', text)
    return f"--config: unknown config field {name!r}" + (
        f" (did you mean {hint.group(1)!r}?)" if hint else "")
