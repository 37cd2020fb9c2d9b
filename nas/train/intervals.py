"""The 95 % Wilson interval of one accuracy measured on n examples.

Why here: `nas-train` reports single accuracies and must not import the search, while the
search's comparisons (`nas.search.strategy.intervals`) build on the same interval; the math lives in
this leaf, below both. The Wilson score interval stays inside [0, 1] and behaves near 100 %,
where a plain normal interval would claim more than is known.
"""

from __future__ import annotations

import math

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
