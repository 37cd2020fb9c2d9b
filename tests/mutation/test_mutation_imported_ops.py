"""Mutating a graph built from the op types added for imported models (a CONCAT of two
branches, squeeze-excite, the new activations) gives valid children."""

import pytest

from nas.graph import OpType
from nas.mutation import NoChildFound, propose_child
from tests.mutation.helpers import check_child, parent_variables
from tests.synthesis.imported_ops import NEW, classifier

FAST = {"linear_p": None}


@pytest.mark.parametrize("config, seeds", [
    ({}, range(3)),
    ({"search_space": {"extra_activations": True}, "mutator": "random_sequential"}, range(3)),
])
def test_children_of_a_graph_with_the_new_op_types_are_valid(config, seeds):
    graph = classifier()
    variables = parent_variables(graph, {})
    children = []
    for seed in seeds:
        try:
            child = propose_child(graph, {}, variables, seed=seed, config={**FAST, **config})
        except NoChildFound:
            continue
        check_child(child, graph, {}, variables)
        children.append(child)
    assert children
    for child in children:  # the branches still meet: chains never replace a CONCAT
        assert any(op.type is OpType.CONCAT for op in child.graph.ops)
    kept_or_new = {op.type for child in children for op in child.graph.ops}
    assert kept_or_new & NEW
    if config:  # allowed anywhere, synthesis puts them into new subgraphs
        assert any(node.op.type in NEW for child in children for node in child.spec)
