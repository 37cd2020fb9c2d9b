"""Candidates to and from other code: `flax_code.export_flax` writes a candidate as plain
`flax.linen` source and its variables, for users who train it without `nas`.

Below the search (DESIGN.md layers): it reads exported candidates (`nas.io`) and graphs.
"""
