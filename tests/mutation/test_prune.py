"""Channel pruning keeps coupled widths coupled, and a removed residual branch leaves a
valid child, on imported models (linen and NNX: GroupNorm, gates, residual adds, layer
scales, depthwise convs, concatenation)."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from nas.graph.ops import OpType
from nas.mutation import MutationConfig, propose_child
from nas.mutation.child import draw_moves
from nas.mutation.net2net import NotApplicable
from nas.mutation.prune import (
    channel_groups,
    drop_branch,
    kept,
    prune,
    removable_branches,
)
from nas.train.fit import resized_in_place
from tests.interop import models
from tests.mutation import user_models
from tests.mutation.helpers import check_valid, drawn_child, logits

INPUT = (1, *models.SHAPE[1:])


@pytest.fixture(scope="module")
def imported():
    return user_models.importer()


def test_a_gate_a_residual_and_group_norm_shrink_as_one_group(imported):
    cand = imported("gated")
    cg = channel_groups(cand.graph, {}, INPUT)
    groups = {r: sorted(n for n, s in cg.producers if cg.find(s) == r) for r in cg.prunable()}
    assert ["Conv_0", "Conv_1"] in groups.values()  # the gate, and what it multiplies
    root = next(r for r, names in groups.items() if names == ["Conv_0", "Conv_1"])
    assert cg.block_count(root) == 4
    keep = kept(cg, cand.variables, root, 0.5)
    assert [int(np.sum((keep >= 4 * b) & (keep < 4 * b + 4))) for b in range(4)] == [2] * 4
    child, consts, values = prune(cand.graph, {}, cand.variables, [root], 0.5, INPUT)
    check_valid(child, consts, values, models.example(5))
    p = values["params"]
    assert p["Conv_0"]["kernel"].shape[-1] == p["Conv_1"]["kernel"].shape[-1] == 8
    assert p["Conv_1"]["kernel"].shape[-2] == p["GroupNorm_0"]["scale"].shape[0] == 8
    assert p["Conv_2"]["kernel"].shape[-2] == 8
    np.testing.assert_array_equal(p["Conv_0"]["kernel"],
                                  np.asarray(cand.variables["params"]["Conv_0"]["kernel"])
                                  [..., keep])


NAMES = ["gated", "residual", "convnext", "cnn", "vit",
         *(pytest.param(n, marks=pytest.mark.slow) for n in ("mobile", "resnet", "branches",
                                                              "mixer"))]


@pytest.mark.parametrize("name", NAMES)
def test_every_group_and_every_branch_gives_a_valid_child(imported, name):
    cand = imported(name)
    x = models.example(5)
    cg = channel_groups(cand.graph, {}, INPUT)
    for roots in [[r] for r in cg.prunable()] + [None]:
        for factor in (0.5, 0.25):
            try:
                child, consts, values = prune(cand.graph, {}, cand.variables, roots, factor,
                                              INPUT)
            except NotApplicable as e:
                assert "\n" not in str(e)
                continue
            check_valid(child, consts, values, x)
            for op in child.ops:  # GroupNorm's groups divide the new width
                if op.type is OpType.GROUP_NORM:
                    width = np.shape(values["params"][op.name]["scale"])[0]
                    assert width % op.op_kwargs.get("num_groups", 32) == 0
    for add, side in removable_branches(cand.graph, {}, INPUT):
        child, consts, values, refit = drop_branch(cand.graph, {}, cand.variables, add, side,
                                                   INPUT)
        check_valid(child, consts, values, x)
        assert refit and set(refit) <= set(values["params"])
        for k, v in values["params"].items():  # what stays keeps its weights
            assert jax.tree.map(np.shape, v) == jax.tree.map(np.shape,
                                                             cand.variables["params"][k])


@pytest.mark.parametrize("name", ["residual", pytest.param("branches", marks=pytest.mark.slow),
                                  pytest.param("resnet", marks=pytest.mark.slow)])
def test_pruning_channels_nothing_reads_leaves_the_logits(imported, name):
    """Where the parent's consumers ignore the channels a group drops, its child computes
    what it computed (1e-5): every producer, carrier and consumer is sliced alike."""
    cand = imported(name)
    x = models.example(5)
    cg = channel_groups(cand.graph, {}, INPUT)
    assert cg.prunable()
    for root in cg.prunable():
        keep = {root: kept(cg, cand.variables, root, 0.5)}
        params = {k: (dict(v) if isinstance(v, dict) else v)
                  for k, v in cand.variables["params"].items()}
        for op_name, layout, kind in cg.consumers:
            dropped = np.setdiff1d(cg.index(layout, {}), cg.index(layout, keep))
            kernel = np.array(params[op_name]["kernel"])
            np.moveaxis(kernel, -2 if kind == "conv" else 0, 0)[dropped] = 0.0
            params[op_name] = {**params[op_name], "kernel": kernel}
        parent = {**cand.variables, "params": params}
        child, consts, values = prune(cand.graph, {}, parent, [root], 0.5, INPUT)
        np.testing.assert_allclose(logits(child, consts, values, x),
                                   logits(cand.graph, {}, parent, x), atol=1e-5, rtol=1e-5)


def test_a_branch_that_adds_zero_goes_without_changing_the_logits(imported):
    cand = imported("residual")
    x = models.example(5)
    [(add, side)] = removable_branches(cand.graph, {}, INPUT)
    params = dict(cand.variables["params"])
    params["b"] = {k: np.zeros_like(v) for k, v in params["b"].items()}  # f(x) = 0
    parent = {**cand.variables, "params": params}
    child, consts, values, refit = drop_branch(cand.graph, {}, parent, add, side, INPUT)
    assert {"a", "b"}.isdisjoint(values["params"]) and refit == ["wide"]
    np.testing.assert_allclose(logits(child, consts, values, x),
                               logits(cand.graph, {}, parent, x), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("move", ["prune", "drop_branch"])
def test_propose_child_draws_the_move_and_records_its_kind(imported, move):
    child = drawn_child(imported("gated"), move, INPUT)
    assert child.new and set(child.variables["params"]) == child.inherited | child.new
    assert resized_in_place(child.new)  # the driver fits the layers after the change
    check_valid(child.graph, child.constants, child.variables, models.example(5))


def test_a_family_that_does_not_apply_gives_its_turn_to_the_next(imported):
    cand = imported("cnn")  # no residual branch of its own
    assert not removable_branches(cand.graph, {}, INPUT)
    child = propose_child(cand.graph, {}, cand.variables, seed=1, config={
        "moves": {"drop_branch": 1.0, "prune": 1e-9}, "input_shape": INPUT})
    assert child.kind == "prune"


def test_draw_moves_is_reproducible_and_never_draws_a_zero_weight():
    import random

    weights = {"subgraph": 0.5, "prune": 0.3, "net2net": 0.0, "drop_branch": 0.2}
    orders = [draw_moves(weights, random.Random(s)) for s in range(200)]
    assert orders == [draw_moves(weights, random.Random(s)) for s in range(200)]
    assert all("net2net" not in o and sorted(o) == ["drop_branch", "prune", "subgraph"]
               for o in orders)
    firsts = [o[0] for o in orders]
    assert firsts.count("subgraph") > firsts.count("drop_branch") > 10


def test_moves_is_checked():
    with pytest.raises(ValueError, match="moves"):
        MutationConfig.from_dict({"moves": {"grow": 1.0}})
    # net2net_p set over a config with moves (the digits preset) decides, as it did
    assert MutationConfig.from_dict({"moves": {"prune": 1.0}, "net2net_p": 0.5}
                                    ).drawn_moves is None
    assert MutationConfig.from_dict({"moves": {"prune": 1}}).moves == {"prune": 1.0}
