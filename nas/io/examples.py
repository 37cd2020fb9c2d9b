"""Per-example correctness, bit-packed: which validation or test examples a model got right.

Why: two candidates evaluated on the same examples are compared by pairing their results
example by example (`nas.stats.paired`), which needs every candidate's right/wrong bit per
example in one fixed example order. Packed with `numpy.packbits` it is n/8 bytes (18 for
the 143 digits validation images); the text form ("N:base64") travels in metrics, JSON and
the exported candidate's metrics without loss.
"""

from __future__ import annotations

import base64
import binascii

import numpy as np


def pack(correct: np.ndarray) -> bytes:
    """The bits of a boolean vector, 8 per byte (big-endian within a byte)."""
    return np.packbits(np.asarray(correct, dtype=bool).reshape(-1)).tobytes()


def unpack(packed: bytes, n: int) -> np.ndarray:
    """The boolean vector of `n` examples that `pack` wrote into `packed`."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"correctness: example count must be an integer >= 0, got {n!r}")
    if len(packed) != (n + 7) // 8:
        raise ValueError(f"correctness: {len(packed)} bytes cannot hold exactly {n} "
                         f"examples (expected {(n + 7) // 8})")
    return np.unpackbits(np.frombuffer(packed, np.uint8), count=n).astype(bool)


def to_text(correct: np.ndarray) -> str:
    """"N:base64 of the packed bits", e.g. "143://///..."."""
    bits = np.asarray(correct, dtype=bool).reshape(-1)
    return f"{bits.size}:{base64.b64encode(pack(bits)).decode('ascii')}"


def from_text(text: str, field: str = "correctness") -> np.ndarray:
    """The boolean vector `to_text` wrote; anything else is a ValueError naming `field`."""
    if not isinstance(text, str) or ":" not in text:
        raise ValueError(f"{field}: expected 'N:base64 bits', got {str(text)[:40]!r}")
    count, _, data = text.partition(":")
    try:
        n = int(count)
        packed = base64.b64decode(data.encode("ascii"), validate=True)
    except (ValueError, binascii.Error, UnicodeEncodeError):
        raise ValueError(f"{field}: expected 'N:base64 bits', got {text[:40]!r}") from None
    try:
        return unpack(packed, n)
    except ValueError as e:
        raise ValueError(f"{field}: {e}") from None
