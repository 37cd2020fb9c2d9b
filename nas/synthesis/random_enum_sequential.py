"""Random enumerative sequential synthesis: like the enumerative synthesizer, but the chains
of each length are visited in a seeded random order instead of lexicographically, so the
first satisfying chain is a random one rather than the "smallest" one."""

from __future__ import annotations

from collections.abc import Iterator

from nas.graph.ops import Op
from nas.synthesis.enum_sequential import EnumerativeSequentialSynthesizer
from nas.synthesis.search_space import num_in_base, op_enumerator, random_sequence_generator

__all__ = ["RandomEnumerativeSequentialSynthesizer", "num_in_base", "random_sequence_generator"]


class RandomEnumerativeSequentialSynthesizer(EnumerativeSequentialSynthesizer):
    def subg_enumerator(self, max_len: int, min_len: int) -> Iterator[list[Op]]:
        gen = lambda: op_enumerator(self.prefix, self.kwarg_defaults, full=False,
                                    op_types=self.op_types, space=self.space)
        return random_sequence_generator(gen, max_len, self.rng, min_len)
