"""The way in: Flax models (linen or NNX) with their weights, as IR candidates.

Above `nas.graph` and beside `nas.io`, below `nas.search`: `from_flax` returns the
`nas.io.candidate.ExportedCandidate` that `nas.load_candidate` returns, so an imported model
is saved, loaded and searched like any exported candidate.
"""

from nas.interop.importer import from_flax

__all__ = ["from_flax"]
