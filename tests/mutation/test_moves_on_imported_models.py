"""Every move on every model the import tests cover (linen and NNX, a layer scale held
directly by a module included) gives a valid child or a one-line refusal, and a move
that raises anything else is named, with where it was raised."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from flax import nnx

import nas
from nas.mutation import MoveFailed, MutationConfig, NoChildFound, net2net, propose_child
from nas.mutation.child import _graph_move
from nas.mutation.config import MOVES
from nas.mutation.move_errors import raised_as, where_raised
from tests.interop import layer_models, models
from tests.mutation.helpers import check_valid, logits

INPUT = (1, *models.SHAPE[1:])
SLOW = pytest.mark.slow  # each model is imported (traced and compiled) once
# The default suite moves the two NNX models with a parameter held directly by a module
# (ConvNeXt's layer scale; the ViT's position embedding and scale) and the plain NNX CNN;
# every other imported model with -m slow.
NAMES = ["convnext", "vit", "cnn", *(pytest.param(n, marks=SLOW) for n in (
    "resnet", "mobile", "mixer", "branches", "linen_einsums", "nnx_general",
    "linen_conv_transpose", "nnx_conv_transpose"))]
LAYERS = {"linen_einsums": layer_models.LinenEinsums, "nnx_general": layer_models.NnxGeneral,
          "linen_conv_transpose": layer_models.LinenConvTranspose,
          "nnx_conv_transpose": layer_models.NnxConvTranspose}


@pytest.fixture(scope="module")
def imported():
    """name -> its candidate (graph, variables), imported once."""
    out = {}

    def get(name):
        if name not in out:
            x = models.example()
            if name in LAYERS:
                cls = LAYERS[name]
                if issubclass(cls, nnx.Module):
                    model, variables = cls(rngs=nnx.Rngs(0)), None
                else:
                    model = cls()
                    variables = jax.jit(model.init)(jax.random.PRNGKey(1), x)
                out[name] = nas.from_flax(model, x, variables=variables)
            else:
                model, variables, kwargs = models.build(name)
                out[name] = nas.from_flax(model, x, variables=variables, **kwargs)
        return out[name]
    return get


def one_line(e: BaseException) -> None:
    assert isinstance(e, ValueError) and str(e).strip() and "\n" not in str(e).strip()


@pytest.mark.parametrize("name", NAMES)
def test_every_move_gives_a_valid_child_or_a_one_line_refusal(imported, name):
    cand = imported(name)
    graph, variables = cand.graph, cand.variables
    x = models.example(seed=5)
    parent = logits(graph, {}, variables, x)
    outcomes = {"child": 0, "refused": 0}

    def attempt(move, preserving, *args):
        try:
            child, consts, values = move(graph, {}, variables, *args)
        except net2net.NotApplicable as e:
            one_line(e)
            outcomes["refused"] += 1
            return
        out = check_valid(child, consts, values, x)
        if preserving:  # Net2Net: the same function before any training
            np.testing.assert_allclose(out, parent, atol=1e-5, rtol=1e-5)
        outcomes["child"] += 1

    rng = np.random.default_rng(0)
    for layer in net2net.widenable(graph):
        units = int(np.asarray(variables["params"][layer]["kernel"]).shape[-1])
        attempt(net2net.widen, True, layer, 2 * units, rng, INPUT)
        attempt(net2net.narrow, False, layer, max(1, units // 2), INPUT)
    for op in net2net.deepenable(graph):
        attempt(net2net.deepen, True, op, "c1/", INPUT)
    for move in MOVES[1:]:  # each graph move on its own (a subgraph is drawn below)
        cfg = MutationConfig.from_dict({"moves": {move: 1.0}, "input_shape": INPUT})
        child = _graph_move(move, graph, {}, variables, cfg, 0, 1, 0.0)
        if child is None:  # does not apply to this model: a one-line refusal inside
            outcomes["refused"] += 1
            continue
        check_valid(child.graph, child.constants, child.variables, x)
        assert set(child.variables["params"]) == child.inherited | child.new
        outcomes["child"] += 1
    for seed in range(3):  # the drawn moves as the driver asks for them
        for config in ({"net2net_p": 1.0}, {"shrink_p": 1.0}, {"net2net_p": 0.0}):
            try:
                child = propose_child(graph, {}, variables, seed=seed, config={
                    "linear_p": None, "input_shape": INPUT, "shrink_p": 0.0, **config})
            except NoChildFound as e:
                assert str(e).strip()
                outcomes["refused"] += 1
                continue
            check_valid(child.graph, child.constants, child.variables, x)
            assert set(child.variables["params"]) == child.inherited | child.new
            outcomes["child"] += 1
    assert outcomes["child"], outcomes  # some move applies to every model here


def test_a_parameter_held_directly_by_a_module_survives_every_net2net_move(imported):
    cand = imported("convnext")
    scales = [k for k, v in cand.variables["params"].items() if not isinstance(v, dict)]
    assert scales  # the layer scale is an array under its op, not a dict
    deeps = net2net.deepenable(cand.graph)
    assert deeps
    for after in deeps:
        try:
            _, _, values = net2net.deepen(cand.graph, {}, cand.variables, after, "c/", INPUT)
        except net2net.NotApplicable:
            continue
        for k in scales:  # kept as it was, and not copied into a dict
            assert np.array_equal(values["params"][k], cand.variables["params"][k])


def test_a_move_that_raises_is_named_with_where_it_was_raised(monkeypatch):
    from nas.zoo import cnn
    from tests.mutation.helpers import parent_variables

    graph, constants, _ = cnn.CifarNet()
    variables = parent_variables(graph, constants)

    def broken(*args, **kwargs):
        return {}["kernel"]  # a bug inside a move

    monkeypatch.setattr(net2net, "deepen", broken)
    monkeypatch.setattr(net2net, "widen", broken)
    with pytest.raises(MoveFailed) as caught:
        propose_child(graph, constants, variables, seed=0,
                      config={"net2net_p": 1.0, "shrink_p": 0.0, "linear_p": None})
    failed = caught.value
    assert failed.kind in ("widen", "deepen")
    assert failed.error == "KeyError: 'kernel'"
    assert failed.where.startswith("nas/mutation/net2net.py:")  # the call of the move
    assert "\n" not in failed.line and failed.line.startswith(f"{failed.kind}: KeyError")


def test_where_names_the_innermost_frame_in_nas():
    with pytest.raises(MoveFailed) as caught, raised_as("shrink"):
        net2net.narrow(None, {}, {}, "x", 1, INPUT)  # a graph that is not one
    failed = caught.value
    assert failed.kind == "shrink" and failed.where.startswith("nas/")
    assert failed.where.rsplit(":", 1)[1].isdigit()
    assert where_raised(ValueError("never raised")) == ""
    with pytest.raises(net2net.NotApplicable), raised_as("widen", net2net.NotApplicable):
        raise net2net.NotApplicable("widen: does not apply")  # a refusal passes as it is
