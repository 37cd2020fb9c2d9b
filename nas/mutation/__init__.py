"""Mutation: select a subgraph, mutate its properties, synthesize a replacement, and build a
child that inherits its parent's weights.

    from nas.mutation import propose_child
    child = propose_child(graph, constants, {"params": params}, seed=0)
"""

from nas.mutation.base import AbstractMutator
from nas.mutation.child import Child, propose_child
from nas.mutation.config import MutationConfig
from nas.mutation.model_mutator import ModelMutator, NoChildFound, fingerprint_at
from nas.mutation.move_errors import MoveFailed
from nas.mutation.random_subgraph import RandomMutator
from nas.mutation.sequential import RandomSequentialMutator

__all__ = ["AbstractMutator", "Child", "ModelMutator", "MoveFailed", "MutationConfig",
           "NoChildFound", "RandomMutator", "RandomSequentialMutator", "fingerprint_at",
           "propose_child"]
