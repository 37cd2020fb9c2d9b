"""`nas.from_flax`: Flax models written as users write them become IR candidates that compute
the same outputs, train the same way, infer their properties, mutate, save and load."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

import nas
from nas.graph import Model, OpType
from nas.graph.subgraph import SubgraphModel
from nas.properties import linear
from tests.interop import models

HAS_NEW_OPS = all(hasattr(OpType, n) for n in ("CONCAT", "RELU6", "HARD_SWISH", "TANH",
                                                "LEAKY_RELU", "ELU"))
SLOW = pytest.mark.slow  # each comparison compiles the module and its IR model once
# The default suite imports one model here (NNX; the linen ResNet in the training test);
# the others run with -m slow.
NAMES = [pytest.param("resnet", marks=SLOW), pytest.param("mobile", marks=SLOW),
         pytest.param("vit", marks=SLOW),
         pytest.param("mixer", marks=SLOW), "cnn", pytest.param(
             "branches", marks=[SLOW, pytest.mark.skipif(not HAS_NEW_OPS,
                                                         reason="needs the ops branch")])]
MUTATED = NAMES


@pytest.fixture(scope="module")
def imported():
    """name -> (module, variables, candidate), each imported once."""
    out = {}

    def get(name):
        if name not in out:
            model, variables, kwargs = models.build(name)
            out[name] = (model, variables,
                         nas.from_flax(model, models.example(), variables=variables, **kwargs))
        return out[name]
    return get


def original(model, variables, x):
    return model.apply(variables, x) if variables is not None else model(x)


@pytest.mark.parametrize("name", NAMES)
def test_outputs_equal_the_original(imported, name):
    model, variables, cand = imported(name)
    x = models.example(seed=7)  # not the example it was imported with
    want = np.asarray(original(model, variables, x))
    got = np.asarray(cand(x))
    assert got.shape == want.shape == (models.SHAPE[0], 10)
    assert np.max(np.abs(got - want)) <= 1e-4 * np.max(np.abs(want))
    assert cand.input_shape == models.SHAPE[1:]


@SLOW
def test_imported_ops_are_the_layers_and_functions_written(imported):
    kinds = {name: [op.type for op in imported(name)[2].graph.ops]
             for name in ("resnet", "mobile", "vit", "mixer", "cnn")}
    assert kinds["resnet"].count(OpType.BATCH_NORM) == 5 and OpType.ADD in kinds["resnet"]
    assert {OpType.MEAN, OpType.SIGMOID, OpType.MUL, OpType.GROUP_NORM,
            OpType.PARAM} <= set(kinds["mobile"])
    mobile = imported("mobile")[2].graph
    assert any(op.op_kwargs.get("feature_group_count") == 16 for op in mobile.ops)
    assert {OpType.LAYER_NORM, OpType.GELU, OpType.PARAM} <= set(kinds["vit"])
    assert kinds["mixer"].count(OpType.TRANSPOSE) >= 3
    assert {OpType.DROPOUT, OpType.AVG_POOL, OpType.FLATTEN} <= set(kinds["cnn"])
    bn = next(op for op in imported("resnet")[2].graph.ops if op.type is OpType.BATCH_NORM
              and op.name.startswith("ResBlock"))
    assert bn.op_kwargs == {"momentum": 0.9, "epsilon": 1e-3}


@pytest.mark.parametrize("name", MUTATED)
def test_properties_infer_and_a_forced_mutation_gives_a_valid_child(imported, name):
    _, _, cand = imported(name)
    x = models.example()
    child = models.infer_and_mutate(cand, x)
    assert child is not None
    assert child.inherited and child.graph != cand.graph
    out = Model(child.graph, child.constants).apply(child.variables, x)
    assert out.shape == (2, 10) and bool(jnp.all(jnp.isfinite(out)))


@pytest.mark.slow  # one Jacobian compiled per op kind
@pytest.mark.parametrize("name", ["resnet", "vit"])
def test_linear_pairings_infer(imported, name):
    _, _, cand = imported(name)
    sm = SubgraphModel(cand.graph, {}, cand.variables, {"input": models.example()})
    assert linear.LinopProperty().infer(sm).pairings


def test_batch_norm_model_trains_as_the_original():
    """A few Adam steps with batch statistics, from the same weights, give the same losses."""
    model = models.LinenResNet(dropout_rate=0.0)
    x, labels = models.example(), jnp.arange(models.SHAPE[0]) % 10
    variables = model.init(jax.random.PRNGKey(1), x)
    cand = nas.from_flax(model, x, variables=variables)
    ir = Model(cand.graph, cand.constants)

    def flax_apply(params, stats):
        out, new = model.apply({"params": params, "batch_stats": stats}, x, train=True,
                               mutable=["batch_stats"])
        return out, new["batch_stats"]

    def ir_apply(params, stats):
        out, new = ir.apply({"params": params, "batch_stats": stats}, x, training=True,
                            mutable=["batch_stats"])
        return out, new["batch_stats"]

    def losses(apply, variables):
        tx = optax.adam(1e-2)
        params, stats = variables["params"], variables["batch_stats"]
        state = tx.init(params)

        def loss_fn(p, s):
            out, new = apply(p, s)
            return optax.softmax_cross_entropy_with_integer_labels(out, labels).mean(), new

        out = []
        grad_fn = jax.jit(jax.value_and_grad(loss_fn, has_aux=True))
        for _ in range(4):
            (loss, stats), grads = grad_fn(params, stats)
            updates, state = tx.update(grads, state, params)
            params = optax.apply_updates(params, updates)
            out.append(float(loss))
        return out, stats

    theirs, their_stats = losses(flax_apply, variables)
    ours, our_stats = losses(ir_apply, jax.tree.map(jnp.asarray, cand.variables))
    np.testing.assert_allclose(ours, theirs, rtol=1e-3)
    assert theirs[-1] < theirs[0]
    mean = next(k for k in our_stats if k.startswith("ResBlock_1") and "BatchNorm_1" in k)
    np.testing.assert_allclose(our_stats[mean]["mean"],
                               their_stats["ResBlock_1"]["BatchNorm_1"]["mean"], rtol=1e-3,
                               atol=1e-5)


def test_save_then_load_gives_the_same_outputs(imported, tmp_path):
    _, _, cand = imported("cnn")
    path = nas.save_candidate(cand, tmp_path / "seed.zip")
    loaded = nas.load_candidate(path)
    x = models.example(seed=11)
    np.testing.assert_array_equal(np.asarray(loaded(x)), np.asarray(cand(x)))
    assert loaded.input_shape == cand.input_shape


def test_save_candidate_refuses_other_objects(tmp_path):
    with pytest.raises(ValueError, match="save_candidate: expected an ExportedCandidate"):
        nas.save_candidate({"graph": 1}, tmp_path / "x.zip")
    assert not list(tmp_path.iterdir())


def _one_line(excinfo) -> str:
    text = str(excinfo.value)
    assert "\n" not in text
    return text


def test_sort_is_refused_in_one_line_naming_it():
    model = models.SortsFeatures()
    with pytest.raises(ValueError) as excinfo:
        nas.from_flax(model, models.example())
    text = _one_line(excinfo)
    assert text.startswith("nas.from_flax: SortsFeatures")
    assert "'sort'" in text and "no IR equivalent" in text


class _Branchy(nn.Module):
    @nn.compact
    def __call__(self, x):
        if jnp.sum(x) > 0:  # data-dependent Python control flow
            x = -x
        return nn.Dense(3)(x.reshape(x.shape[0], -1))


class _Shared(nn.Module):
    @nn.compact
    def __call__(self, x):
        dense = nn.Dense(4)
        return dense(dense(x.reshape(x.shape[0], -1)[:, :4]))


class _WhileLoop(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = jax.lax.fori_loop(0, 2, lambda i, v: v * 2.0, x)
        return nn.Dense(3)(x.reshape(x.shape[0], -1))


class _Clipped(nn.Module):
    @nn.compact
    def __call__(self, x):  # relu on [-7, 7], not beyond: no IR activation
        return nn.Dense(3)(jnp.clip(x.reshape(x.shape[0], -1), 0.0, 10.0))


@pytest.mark.parametrize("model, message", [
    (_Clipped(), r"_Clipped \(in clip\): primitive '(max|min|clamp)'"),
    (_Branchy(), "depends on the values of its input"),
    (_Shared(), "called more than once"),
    (_WhileLoop(), "primitive '(scan|while)'"),
])
def test_unsupported_models_are_one_line(model, message):
    with pytest.raises(ValueError, match=message) as excinfo:
        nas.from_flax(model, models.example())
    _one_line(excinfo)


def test_bad_arguments_are_one_line():
    x = models.example()
    with pytest.raises(ValueError, match="example_input must be an array"):
        nas.from_flax(models.LinenResNet(), [1, 2, 3])
    with pytest.raises(ValueError, match="expected a flax.linen or flax.nnx Module"):
        nas.from_flax(lambda v: v, x)
    with pytest.raises(ValueError, match="NNX module holds its own state"):
        nas.from_flax(models.NnxCNN(rngs=nnx.Rngs(0)), x, variables={"params": {}})
    with pytest.raises(ValueError, match="calling the module on the example") as excinfo:
        nas.from_flax(models.LinenResNet(), x, variables={"params": {}})
    _one_line(excinfo)


def test_an_nnx_model_in_training_mode_is_refused():
    model = models.NnxCNN(rngs=nnx.Rngs(0))  # nnx layers start in training mode
    with pytest.raises(ValueError, match=r"bn \(flax.nnx.BatchNorm\).*model.eval\(\)"):
        nas.from_flax(model, models.example())


class _NNXBlock(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.conv = nnx.Conv(8, 8, (3, 3), rngs=rngs)

    def __call__(self, x):
        return nnx.relu(self.conv(x)) + x  # plain code between layers


class _NNXNet(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.stem = nnx.Conv(3, 8, (3, 3), rngs=rngs)
        self.blocks = nnx.List([_NNXBlock(rngs), _NNXBlock(rngs)])
        self.head = nnx.Linear(8, 10, rngs=rngs)

    def __call__(self, x):
        x = self.stem(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x.mean(axis=(1, 2)))


class _LinenBlock(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.relu(nn.Conv(8, (3, 3))(x)) + x


class _LinenNet(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.Conv(8, (3, 3))(x)
        x = _LinenBlock()(x)
        x = _LinenBlock()(x)
        return nn.Dense(10)(x.mean(axis=(1, 2)))


def test_code_between_layers_is_named_after_its_module_in_nnx_as_in_linen():
    x = jnp.ones((2, 8, 8, 3))
    nnx_names = [op.name for op in nas.from_flax(_NNXNet(nnx.Rngs(0)), x).graph.ops]
    linen = _LinenNet()
    linen_names = [op.name for op in nas.from_flax(
        linen, x, variables=linen.init(jax.random.PRNGKey(0), x)).graph.ops]
    assert nnx_names == ["stem", "blocks/0/conv", "blocks/0/relu", "blocks/0/add",
                         "blocks/1/conv", "blocks/1/relu", "blocks/1/add", "mean", "head"]
    assert linen_names == ["Conv_0", "_LinenBlock_0/Conv_0", "_LinenBlock_0/relu",
                           "_LinenBlock_0/add", "_LinenBlock_1/Conv_0", "_LinenBlock_1/relu",
                           "_LinenBlock_1/add", "mean", "Dense_0"]
