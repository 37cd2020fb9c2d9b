"""The 95 % Wilson interval of an accuracy measured on n examples, and what reads it.

Why: an accuracy measured on n examples moves by 1/n per example, and its standard error
near 0.98 on 360 examples is 0.7 points; a difference inside that is not evidence. The
Wilson score interval stays inside [0, 1] and behaves near 100 %, where a plain normal
interval would claim more than is known. `nas-train` prints it for one accuracy; the
search's summary and tie groups compare two.
"""

from __future__ import annotations

import math

import numpy as np

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


def percent_text(accuracy: float, n: int, note: str = "") -> str:
    """The accuracy in percent with its interval and size, e.g. `97.50 % (95 % interval
    95.44-98.68 %, n=360; split 'test')` with `note` "split 'test'": how a person reads one
    measured accuracy."""
    low, high = wilson(accuracy, n)
    return (f"{accuracy * 100:.2f} % (95 % interval {low * 100:.2f}-{high * 100:.2f} %, "
            f"n={n}{'; ' + note if note else ''})")


def overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """Whether two intervals share a point."""
    return a[0] <= b[1] and b[0] <= a[1]


def text(accuracy: float, n: int | None) -> str:
    """e.g. "0.9750 [0.948, 0.988] n=360" (no interval when n is unknown)."""
    if not n:
        return f"{accuracy:.4f}"
    low, high = wilson(accuracy, int(n))
    return f"{accuracy:.4f} [{low:.3f}, {high:.3f}] n={int(n)}"


def compare(child: tuple[float, int | None], seed: tuple[float, int | None]) -> str:
    """A child's accuracy against its seed's: "better", "worse", or "within noise" when
    their intervals overlap or a size is unknown."""
    (a, n), (b, m) = child, seed
    if not n or not m or overlap(wilson(a, int(n)), wilson(b, int(m))):
        return "within noise"
    return "better" if a > b else "worse"


def tied(a: float, n: int, b: float, m: int) -> bool:
    """Whether accuracies `a` (on n examples) and `b` (on m) lie inside one another's
    interval: the tie of selection and the summary (stricter than overlapping)."""
    a_low, a_high = wilson(a, n)
    b_low, b_high = wilson(b, m)
    return a_low <= b <= a_high and b_low <= a <= b_high


def wilson_arrays(accuracies: np.ndarray, sizes: np.ndarray, z: float = Z95
                  ) -> tuple[np.ndarray, np.ndarray]:
    """`wilson` of many accuracies at once, with the same arithmetic (the same bits)."""
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
