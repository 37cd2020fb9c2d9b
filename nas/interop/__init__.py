"""Candidates to and from other code, below the search.

The way in: `importer.from_flax` traces a user's Flax model (linen or NNX) with its weights
into the `nas.io.candidate.ExportedCandidate` that `nas.load_candidate` returns, so an
imported model is saved, loaded and searched like any exported candidate; `check` compares
an import's outputs with the module's, and `cli` is `nas-search import`, which runs it. The way out:
`flax_code.export_flax` writes a candidate as plain `flax.linen` source and its variables,
for users who train it without `nas`. Nothing is imported here, so that each stays cheap.
"""
