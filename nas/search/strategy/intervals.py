"""95 % Wilson intervals of accuracies, and which accuracies noise cannot tell apart.

Why: an accuracy measured on n examples moves by 1/n per example, and its standard error
near 0.98 on 360 examples is 0.7 points; a difference inside that is not evidence. The
Wilson score interval is used because it stays inside [0, 1] and behaves near 100 %.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from nas.train.intervals import Z95, wilson


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


def tied_accuracies(accuracies: Sequence[float], sizes: Sequence[int | None]) -> list[float]:
    """Each accuracy replaced by the best of its tie group: from the most accurate down,
    a group takes every remaining accuracy whose interval and the head's contain each
    other's value. So a ranking that reads these values sees a tie where noise cannot tell
    the accuracies apart (and a cost objective then decides)."""
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
            if tied(accuracies[head], int(sizes[head]), accuracies[other], int(sizes[other])):
                out[other] = out[head]
                grouped.add(other)
    return out


def wilson_arrays(accuracies: np.ndarray, sizes: np.ndarray, z: float = Z95
                  ) -> tuple[np.ndarray, np.ndarray]:
    """`wilson` of many accuracies at once, with the same arithmetic in the same order (so
    the same bits): selection computes it for a whole population per proposal."""
    a = np.asarray(accuracies, dtype=float)
    n = np.asarray(sizes, dtype=float)
    bad_n = ~((n >= 1) & (n == np.floor(n)))
    if bad_n.any():
        raise ValueError(f"wilson: n must be an integer >= 1 (examples measured), got "
                         f"{n[np.argmax(bad_n)]!r}")
    bad_a = ~((a >= 0.0) & (a <= 1.0))
    if bad_a.any():
        raise ValueError(f"wilson: accuracy must be a fraction in [0, 1], got "
                         f"{float(a[np.argmax(bad_a)])!r}")
    z2 = z * z
    center = (a + z2 / (2 * n)) / (1 + z2 / n)
    half = z / (1 + z2 / n) * np.sqrt(a * (1 - a) / n + z2 / (4 * n * n))
    return np.maximum(0.0, center - half), np.minimum(1.0, center + half)
