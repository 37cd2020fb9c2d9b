"""An earlier stride and a depthwise-separable conv: valid children at fewer FLOPs on
models written the way users write them, coupled tensors kept at one resolution, and a
start the fit brings near the parent."""

from __future__ import annotations

import flax.linen as nn
import jax
import numpy as np
import pytest

import nas
from nas.graph.ops import OpType
from nas.mutation.net2net import NotApplicable
from nas.mutation.separable import cost_ratio, rank_one_factors, separable, separable_convs
from nas.mutation.stride import earlier_stride, stride_moves, strides_of
from nas.properties.tensor_shapes import graph_shapes
from nas.train.fit import fit_new_ops, resized_in_place
from nas.train.fit_config import FitConfig
from tests.interop import models
from tests.mutation import user_models
from tests.mutation.helpers import check_valid, drawn_child, logits

INPUT = (1, *models.SHAPE[1:])


@pytest.fixture(scope="module")
def imported():
    return user_models.importer()


def flops(graph, constants, variables):
    from nas.graph import Model
    from nas.train.perf import flops_per_example

    model = Model(graph, constants)
    return flops_per_example(lambda v, x: model.apply(v, x), variables, INPUT[1:])


def op(graph, name):
    return next(o for o in graph.ops if o.name == name)


class SkipPastTheConv(nn.Module):
    """A skip that starts before the last conv ahead of the pool: that conv cannot take
    the pool's stride (its output would meet the skip at another resolution), the one
    before it can (the whole block moves)."""

    @nn.compact
    def __call__(self, x):
        x0 = nn.relu(nn.Conv(8, (3, 3), name="first")(x))
        y = nn.Conv(8, (3, 3), name="second")(x0)
        x = nn.max_pool(nn.relu(x0 + y), (2, 2), (2, 2))
        return nn.Dense(10)(x.reshape((x.shape[0], -1)))


@pytest.mark.parametrize("name, pair", [("residual", ("stem", "wide")),
                                        ("gated", ("Conv_0", "max_pool"))])
def test_a_stride_moves_before_a_residual_block_or_a_gate_whole(imported, name, pair):
    cand = imported(name)
    assert stride_moves(cand.graph, {}, INPUT) == [pair]
    early, late = pair
    child, consts, values, fit_to = earlier_stride(cand.graph, {}, cand.variables, early,
                                                   late, INPUT)
    check_valid(child, consts, values, models.example(5))
    assert strides_of(op(child, early), 2) == (2, 2)
    assert strides_of(op(child, late), 2) == (1, 1)
    before = graph_shapes(cand.graph, {}, {"input": INPUT})
    after = graph_shapes(child, consts, {"input": INPUT})
    out = f"{late}:0"
    assert after.shape(out) == before.shape(out)  # everything after it is untouched
    assert after.shape(f"{early}:0")[1] == before.shape(f"{early}:0")[1] // 2
    assert fit_to == sorted(pair)
    for k, v in cand.variables["params"].items():  # every weight kept as it was
        for a, b in zip(jax.tree.leaves(v), jax.tree.leaves(values["params"][k]), strict=True):
            assert np.array_equal(a, b)
    assert flops(child, consts, values) < flops(cand.graph, {}, cand.variables)


def test_a_valid_pool_that_loses_its_stride_pads_same():
    x = models.example()
    model = SkipPastTheConv()
    cand = nas.from_flax(model, x, variables=model.init(jax.random.PRNGKey(0), x))
    # "second": its output meets the skip from "first" after the stride
    assert stride_moves(cand.graph, {}, INPUT) == [("first", "max_pool")]
    child, consts, values, _ = earlier_stride(cand.graph, {}, cand.variables, "first",
                                              "max_pool", INPUT)
    check_valid(child, consts, values, models.example(5))
    assert op(child, "max_pool").input_kwargs["padding"] == "SAME"
    with pytest.raises(NotApplicable, match="stride"):  # not a pair it offers
        earlier_stride(cand.graph, {}, cand.variables, "nothing", "max_pool", INPUT)


def test_a_kernel_of_rank_one_per_channel_becomes_separable_with_the_same_logits(imported):
    cand = imported("residual")
    rng = np.random.default_rng(0)
    params = dict(cand.variables["params"])
    kernel = np.asarray(params["a"]["kernel"])
    spatial = rng.normal(size=(*kernel.shape[:2], kernel.shape[2]))
    channel = rng.normal(size=kernel.shape[2:])
    exact = (spatial[..., :, None] * channel[None, None]).astype(np.float32) / 3
    params["a"] = {**params["a"], "kernel": exact}
    parent = {**cand.variables, "params": params}
    child, consts, values, fit_to = separable(cand.graph, {}, parent, "a", "c1/", INPUT)
    assert fit_to == ["a"]
    depth, point = op(child, "c1/a/depthwise"), op(child, "a")
    assert depth.op_kwargs["feature_group_count"] == 8 and depth.op_kwargs["use_bias"] is False
    assert tuple(point.op_kwargs["kernel_size"]) == (1, 1)
    x = models.example(5)
    np.testing.assert_allclose(logits(child, consts, values, x),
                               logits(cand.graph, {}, parent, x), atol=1e-5, rtol=1e-5)
    assert flops(child, consts, values) < flops(cand.graph, {}, parent)


def test_rank_one_factors_are_the_best_rank_one_fit_per_channel():
    kernel = np.random.default_rng(1).normal(size=(3, 3, 4, 6)).astype(np.float32)
    depthwise, pointwise = rank_one_factors(kernel)
    assert depthwise.shape == (3, 3, 1, 4) and pointwise.shape == (1, 1, 4, 6)
    for c in range(4):
        approx = depthwise[..., 0, c].reshape(-1, 1) * pointwise[0, 0, c][None]
        s = np.linalg.svd(kernel[..., c, :].reshape(9, 6), compute_uv=False)
        error = np.linalg.norm(kernel[..., c, :].reshape(9, 6) - approx)
        assert error == pytest.approx(np.sqrt(np.sum(s[1:] ** 2)), rel=1e-4)  # Eckart-Young


def test_separable_skips_convs_where_it_would_not_pay(imported):
    cand = imported("cnn")
    names = separable_convs(cand.graph, cand.variables)
    first = next(o.name for o in cand.graph.ops if o.type is OpType.CONV)
    assert first not in names  # three input channels: too few to factor
    assert names and all(op(cand.graph, n).type is OpType.CONV for n in names)
    assert cost_ratio(9, 8, 16) == pytest.approx((72 + 128) / 1152)
    assert separable_convs(imported("convnext").graph, imported("convnext").variables) == []
    with pytest.raises(NotApplicable, match="separable"):
        separable(cand.graph, {}, cand.variables, first, "c1/", INPUT)


@pytest.mark.parametrize("move", ["stride", "separable"])
def test_the_fit_brings_the_child_near_its_parent(imported, move):
    cand = imported("residual")
    child = drawn_child(cand, move, INPUT)
    assert child.fit_to and child.new <= set(child.variables["params"])
    theirs = {o.name for o in cand.graph.ops}
    pairs = resized_in_place(n for n in child.fit_to if n in theirs)  # as the driver asks
    images = [np.asarray(models.example(s)) for s in range(4)]
    fitted, info = fit_new_ops((cand.graph, {}, cand.variables),
                               (child.graph, child.constants, child.variables), child.new,
                               pairs, images, FitConfig(steps=30))
    assert info["mse_after"] < info["mse_before"]
    check_valid(child.graph, child.constants, fitted, models.example(5))


def test_a_narrower_head_is_a_prune_of_its_hidden_dense(imported):
    from nas.mutation.prune import channel_groups, prune

    cand = imported("gated")
    cg = channel_groups(cand.graph, {}, INPUT)
    head = [r for r in cg.prunable()
            if [n for n, s in cg.producers if cg.find(s) == r] == ["Dense_1"]]
    assert head  # the hidden layer of the flatten-dense head is a group of its own
    child, consts, values = prune(cand.graph, {}, cand.variables, head, 0.5, INPUT)
    check_valid(child, consts, values, models.example(5))
    assert np.shape(values["params"]["Dense_1"]["kernel"])[-1] == 8
    assert np.shape(values["params"]["Dense_0"]["kernel"])[0] == 8
    assert flops(child, consts, values) < flops(cand.graph, {}, cand.variables)
