"""Tango's score interval for the difference of two accuracies on the same examples.

Why: on n shared examples, b only the first got right and c only the second; the
difference is (b - c) / n, and how sure it is depends on b + c, itself random. Tango's
score interval (Tango 1998, Stat Med 17:891-908) inverts the score test of "difference =
d" with the discordant cells' maximum likelihood under d, so it accounts for both: the
usual interval for paired non-inferiority. The exact conditional one holds b + c fixed,
and when every discordant example goes one way its bound is the estimate itself.

Limits are found by bisection on the score statistic (monotone in d). `bounds` runs it on
arrays of tables, `bounds_one` on one table in plain floats (numpy's per-call cost
dominated a table alone), with the same IEEE operations in the same order (the same
bits). b = c = 0 gives +-z^2 / (n + z^2), not [0, 0]: agreement bounds the difference.
"""

from __future__ import annotations

import math

import numpy as np

from nas.stats.intervals import Z95

# Bisection steps: the bracket is at most 2 wide, so 64 halvings reach the float spacing.
_STEPS = 64


def _counts(name: str, value: np.ndarray | int) -> np.ndarray:
    """`value` as float64 counts, refusing what is not a whole number >= 0."""
    x = np.asarray(value, dtype=np.float64)
    bad = ~((x >= 0) & (x == np.floor(x)))
    if bad.any():
        raise ValueError(f"paired interval: {name} must be whole counts >= 0, got "
                         f"{float(x[bad].reshape(-1)[0]):g}")
    return x


def statistic(d: np.ndarray, n: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Tango's score statistic of "difference = d" for tables (n, b, c): decreasing in d,
    0 at d = (b - c) / n; NaN only for 0 / 0."""
    a = 2.0 * n
    lin = -b - c + (2.0 * n - b + c) * d
    const = -c * d * (1.0 - d)
    root = np.sqrt(np.maximum(lin * lin - 4.0 * a * const, 0.0))
    # q, the constrained ML estimate of P(only the second right): the non-negative root
    # of a q^2 + lin q + const, without cancellation when lin > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(lin > 0, -2.0 * const / (lin + root), (root - lin) / (2.0 * a))
        variance = n * np.maximum(2.0 * q + d * (1.0 - d), 0.0)
        return (b - c - n * d) / np.sqrt(variance)


def bounds(n: np.ndarray | int, only_a: np.ndarray | int, only_b: np.ndarray | int,
           z: float = Z95) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) of the two-sided score interval of p_a - p_b, elementwise over tables of
    n examples with only_a right only for a and only_b only for b, at the level of `z`."""
    n = _counts("n", n)
    b, c = np.broadcast_arrays(_counts("only_a", only_a), _counts("only_b", only_b))
    n = np.broadcast_to(n, b.shape)
    bad = ~((n >= 1) & (b + c <= n))
    if bad.any():
        i = np.argmax(bad.reshape(-1))
        raise ValueError(f"paired interval: expected n >= 1 examples and only_a + only_b <= "
                         f"n, got n={n.reshape(-1)[i]:g}, only_a={b.reshape(-1)[i]:g}, "
                         f"only_b={c.reshape(-1)[i]:g}")
    if not (np.isfinite(z) and z > 0):
        raise ValueError(f"paired interval: z must be a positive normal quantile, got {z!r}")
    estimate = (b - c) / n
    low = _root(n, b, c, -np.ones_like(estimate), estimate, float(z))
    high = _root(n, b, c, estimate, np.ones_like(estimate), -float(z))
    low = np.where(estimate <= -1.0, -1.0, low)
    high = np.where(estimate >= 1.0, 1.0, high)
    return low, high


def _root(n: np.ndarray, b: np.ndarray, c: np.ndarray, lo: np.ndarray, hi: np.ndarray,
          level: float) -> np.ndarray:
    """The d in (lo, hi) where the statistic crosses `level`, by bisection (0 / 0: 0)."""
    lo, hi = lo.copy(), hi.copy()
    for _ in range(_STEPS):
        mid = 0.5 * (lo + hi)
        above = np.nan_to_num(statistic(mid, n, b, c), nan=0.0) > level
        lo = np.where(above, mid, lo)
        hi = np.where(above, hi, mid)
    return 0.5 * (lo + hi)


def bounds_one(n: int, only_a: int, only_b: int, z: float = Z95) -> tuple[float, float]:
    """`bounds` of one table, in plain floats (the same bits)."""
    if not _plain(n, only_a, only_b, z):  # `bounds` refuses it with its one line
        low, high = bounds(n, only_a, only_b, z)
        return float(low), float(high)
    n, b, c = float(n), float(only_a), float(only_b)
    estimate = (b - c) / n
    low = -1.0 if estimate <= -1.0 else _root_one(n, b, c, -1.0, estimate, float(z))
    high = 1.0 if estimate >= 1.0 else _root_one(n, b, c, estimate, 1.0, -float(z))
    return low, high


def _plain(n: object, b: object, c: object, z: float) -> bool:
    """Whether (n, b, c, z) is one valid table of whole counts (else `bounds` decides)."""
    try:
        n, b, c = (float(v) for v in (n, b, c))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False
    whole = all(v >= 0 and v == math.floor(v) for v in (n, b, c))
    return whole and n >= 1 and b + c <= n and math.isfinite(z) and z > 0


def _statistic_one(d: float, n: float, b: float, c: float) -> float:
    """`statistic` for one table, operation for operation; its 0 / 0 is 0."""
    a = 2.0 * n
    lin = -b - c + (2.0 * n - b + c) * d
    const = -c * d * (1.0 - d)
    root = math.sqrt(max(lin * lin - 4.0 * a * const, 0.0))
    q = -2.0 * const / (lin + root) if lin > 0 else (root - lin) / (2.0 * a)
    variance = n * max(2.0 * q + d * (1.0 - d), 0.0)
    top = b - c - n * d
    if variance == 0.0:
        return math.copysign(math.inf, top) if top else 0.0
    return top / math.sqrt(variance)


def _root_one(n: float, b: float, c: float, lo: float, hi: float, level: float) -> float:
    """`_root` for one table."""
    for _ in range(_STEPS):
        mid = 0.5 * (lo + hi)
        if _statistic_one(mid, n, b, c) > level:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)
