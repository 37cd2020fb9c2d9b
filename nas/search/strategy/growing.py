"""Arrays that grow by appending (and inserting) in amortized constant time per row.

Why: a `numpy.concatenate` per proposal copies the whole population every time. These keep
a buffer with spare room (doubling when full) and hand out views of the filled part; an
earlier view keeps its rows after appends, not after an `insert`, which shifts them.
"""

from __future__ import annotations

import numpy as np


class Growing:
    """A 1-D array (or 2-D, rows growing, with a fixed or widening second axis)."""

    def __init__(self, dtype: type | np.dtype, width: int | None = None) -> None:
        self._width = width
        shape = (16,) if width is None else (16, width)
        self._buffer = np.zeros(shape, dtype=dtype)
        self._size = 0

    def __len__(self) -> int:
        return self._size

    @property
    def view(self) -> np.ndarray:
        """The filled rows (a view: no copy)."""
        return self._buffer[: self._size]

    def extend(self, rows: np.ndarray) -> None:
        """Append rows (2-D: narrower rows are padded with zeros, wider ones widen it)."""
        rows = np.asarray(rows, dtype=self._buffer.dtype)
        if self._width is not None and rows.shape[1] != self._width:
            rows = self._fit(rows)
        self._reserve(self._size + len(rows))
        self._buffer[self._size: self._size + len(rows)] = rows
        self._size += len(rows)

    def insert(self, at: int, value: object) -> None:
        self._reserve(self._size + 1)
        self._buffer[at + 1: self._size + 1] = self._buffer[at: self._size]  # numpy: overlap ok
        self._buffer[at] = value
        self._size += 1

    def _reserve(self, size: int) -> None:
        if size <= len(self._buffer):
            return
        grown = np.zeros((max(size, 2 * len(self._buffer)), *self._buffer.shape[1:]),
                         dtype=self._buffer.dtype)
        grown[: self._size] = self._buffer[: self._size]
        self._buffer = grown

    def _fit(self, rows: np.ndarray) -> np.ndarray:
        if rows.shape[1] > self._width:
            self._width = rows.shape[1]
            wider = np.zeros((len(self._buffer), self._width), dtype=self._buffer.dtype)
            wider[:, : self._buffer.shape[1]] = self._buffer
            self._buffer = wider
        if rows.shape[1] < self._width:
            rows = np.pad(rows, ((0, 0), (0, self._width - rows.shape[1])))
        return rows
