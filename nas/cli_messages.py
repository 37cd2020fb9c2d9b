"""One-line messages shared by both command lines (`nas-train`, `nas-search`)."""

from __future__ import annotations

import re
from collections.abc import Sequence


def unknown_field_line(e: BaseException, argv: Sequence[str] = ()) -> str:
    """`--config.x.y=v` for a field the config lacks, as one clean line (ml_collections'
    message arrives quoted and escaped, with a suggestion on a second line, and names only
    the last part of the field: the whole `x.y` is taken from `argv` when it is there)."""
    text = str(e.args[0]) if e.args else str(e)
    for _ in range(3):
        text = text.replace("\\\\", "\\").replace("\\'", "'").replace("\\n", "\n")
    lines = [ln.strip().strip("'\"\\") for ln in text.splitlines() if ln.strip()]
    name = lines[0] if lines else "?"
    given = [a[len("--config."):].split("=", 1)[0] for a in argv if a.startswith("--config.")]
    path = next((g for g in given if g == name or g.endswith(f".{name}")), name)
    hint = re.search(r'Did you mean "([^"]+)"', text)
    section = path[:len(path) - len(name)]  # "search." for "search.max_candidatez"
    return f"--config: unknown config field {path!r}" + (
        f" (did you mean {section + hint.group(1)!r}?)" if hint else "")
