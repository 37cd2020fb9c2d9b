"""Atomic file writes for the study's files (the implementation lives in `nas.io.atomic`)."""

from nas.io.atomic import atomic_write_bytes, atomic_write_text

__all__ = ["atomic_write_bytes", "atomic_write_text"]
