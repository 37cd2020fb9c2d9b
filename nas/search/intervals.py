"""95 % Wilson intervals of accuracies, and which accuracies noise cannot tell apart.

Why: an accuracy measured on n examples moves by 1/n per example, and its standard error
near 0.98 on 360 examples is 0.7 points; a difference inside that is not evidence. The
Wilson score interval is used because it stays inside [0, 1] and behaves near 100 %.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

Z95 = 1.959963984540054  # two-sided 95 % normal quantile


def wilson(accuracy: float, n: int, z: float = Z95) -> tuple[float, float]:
    """(low, high) of the Wilson score interval of `accuracy` measured on `n` examples."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"wilson: n must be an integer >= 1 (examples measured), got {n!r}")
    if not 0.0 <= accuracy <= 1.0:
        raise ValueError(f"wilson: accuracy must be a fraction in [0, 1], got {accuracy!r}")
    z2 = z * z
    center = (accuracy + z2 / (2 * n)) / (1 + z2 / n)
    half = z / (1 + z2 / n) * math.sqrt(accuracy * (1 - accuracy) / n + z2 / (4 * n * n))
    return max(0.0, center - half), min(1.0, center + half)


def overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """Whether two intervals share a point."""
    return a[0] <= b[1] and b[0] <= a[1]


def text(accuracy: float, n: int | None) -> str:
    """The accuracy with its interval and size, e.g. 0.9750 [0.948, 0.988] n=360 (no
    interval when n is unknown)."""
    if not n:
        return f"{accuracy:.4f}"
    low, high = wilson(accuracy, int(n))
    return f"{accuracy:.4f} [{low:.3f}, {high:.3f}] n={int(n)}"


def compare(child: tuple[float, int | None], seed: tuple[float, int | None]) -> str:
    """A child's accuracy against its seed's: "better", "worse" or "within noise", by
    whether their 95 % intervals overlap ("within noise" too when a size is unknown)."""
    (a, n), (b, m) = child, seed
    if not n or not m or overlap(wilson(a, int(n)), wilson(b, int(m))):
        return "within noise"
    return "better" if a > b else "worse"


def tied(a: float, n: int, b: float, m: int) -> bool:
    """Whether accuracies `a` (on n examples) and `b` (on m) lie inside one another's
    interval: the tie that selection and the summary's cheapest child use (stricter than
    overlapping intervals)."""
    a_low, a_high = wilson(a, n)
    b_low, b_high = wilson(b, m)
    return a_low <= b <= a_high and b_low <= a <= b_high


def tied_accuracies(accuracies: Sequence[float], sizes: Sequence[int | None],
                    correct: Sequence[Any] | None = None) -> list[float]:
    """Each accuracy replaced by the best of its tie group: from the most accurate down,
    a group takes every remaining accuracy whose interval and the head's contain each
    other's value. So a ranking that reads these values sees a tie where noise cannot tell
    the accuracies apart (and a cost objective then decides).

    `correct` (optional, one per accuracy): which examples each got right. Where both the
    head and another have them on the same examples, they tie when the paired comparison
    (`nas.search.paired`) finds them within noise; otherwise the Wilson rule above."""
    from nas.search import paired  # it imports this module's Z95

    order = sorted(range(len(accuracies)), key=lambda i: (-accuracies[i], i))
    out = list(map(float, accuracies))
    grouped: set[int] = set()
    for head in order:
        if head in grouped:
            continue
        grouped.add(head)
        if not sizes[head]:
            continue
        for other in order:
            if other in grouped or not sizes[other]:
                continue
            if correct is not None and paired.comparable(correct[head], correct[other]):
                same = paired.compare(correct[head], correct[other]).decision == \
                    "within noise"
            else:
                same = tied(accuracies[head], int(sizes[head]), accuracies[other],
                            int(sizes[other]))
            if same:
                out[other] = out[head]
                grouped.add(other)
    return out
