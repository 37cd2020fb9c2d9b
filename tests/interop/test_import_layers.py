"""Layers with no IR op of their own: linen/NNX Einsum and NNX LinearGeneral import whole as
DENSE_GENERAL (kernel in DenseGeneral's layout), ConvTranspose as one CONV with input
dilation and its bias; an einsum that is no DenseGeneral is traced through; Embed and a
circular ConvTranspose are refused in one line naming the layer and where it sits."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

import nas
from nas.graph import Model, OpType
from nas.interop.einsum import as_dense_general
from tests.interop import layer_models, models

NAMES = ["linen_einsums", "nnx_general", "linen_conv_transpose", "nnx_conv_transpose"]
CLASSES = {"linen_einsums": layer_models.LinenEinsums, "nnx_general": layer_models.NnxGeneral,
           "linen_conv_transpose": layer_models.LinenConvTranspose,
           "nnx_conv_transpose": layer_models.NnxConvTranspose}


@pytest.fixture(scope="module")
def imported():
    """name -> (apply function of the original, its variables or None, candidate)."""
    out = {}

    def get(name):
        if name not in out:
            cls, x = CLASSES[name], models.example()
            if issubclass(cls, nnx.Module):
                model, variables = cls(rngs=nnx.Rngs(0)), None
                apply = model
            else:
                model = cls()
                variables = jax.jit(model.init)(jax.random.PRNGKey(1), x)
                apply = (lambda m, v: lambda x: m.apply(v, x))(model, variables)
            out[name] = (apply, variables, nas.from_flax(model, x, variables=variables))
        return out[name]
    return get


@pytest.mark.parametrize("name", NAMES)
def test_outputs_equal_the_original(imported, name):
    apply, _, cand = imported(name)
    x = models.example(seed=7)  # not the example it was imported with
    with jax.default_matmul_precision("float32"):  # not TF32 on a GPU
        want = np.asarray(jax.jit(apply)(x))  # jitted: one compilation, not one per primitive
        got = np.asarray(jax.jit(cand.model.apply)(cand.variables, x))
    assert got.shape == want.shape == (models.SHAPE[0], 10)
    assert np.max(np.abs(got - want)) <= 1e-4 * np.max(np.abs(want))


def _ops(cand):
    return {op.name: op for op in cand.graph.ops}


def test_einsums_that_are_dense_generals_are_one_op_each(imported):
    _, variables, cand = imported("linen_einsums")
    ops = _ops(cand)
    assert ops["Einsum_0"].type is OpType.DENSE_GENERAL
    assert ops["Einsum_0"].op_kwargs == {"features": [4, 8], "axis": [-1]}
    assert ops["Einsum_1"].op_kwargs == {"features": [12], "axis": [-2, -1],
                                         "use_bias": False}
    # "btnh,hnd->btd": the kernel (h, n, d) in DenseGeneral's layout (n, h, d)
    kernel = variables["params"]["Einsum_1"]["kernel"]
    np.testing.assert_array_equal(cand.variables["params"]["Einsum_1"]["kernel"],
                                  np.transpose(kernel, (1, 0, 2)))
    # "btd,td->btd" weighs each token: no DenseGeneral, its primitives are imported
    assert not any(op.type is OpType.DENSE_GENERAL for n, op in ops.items()
                   if n.startswith("per_token"))
    assert any(op.type is OpType.DOT_GENERAL for n, op in ops.items()
               if n.startswith("per_token"))


def test_nnx_linear_general_and_einsum_are_dense_generals(imported):
    _, _, cand = imported("nnx_general")
    ops = _ops(cand)
    assert ops["mix"].op_kwargs == {"features": [6, 5], "axis": [-2, -1]}
    assert ops["rows"].type is OpType.DENSE_GENERAL
    assert ops["head"].op_kwargs == {"features": [10], "axis": [-2, -1]}
    assert cand.variables["params"]["head"]["kernel"].shape == (6, 7, 10)
    assert not any(op.type is OpType.DENSE_GENERAL for n, op in ops.items()
                   if n.startswith("scale"))


@pytest.mark.parametrize("name", ["linen_conv_transpose", "nnx_conv_transpose"])
def test_conv_transpose_is_one_conv_with_its_bias(imported, name):
    _, _, cand = imported(name)
    types = [op.type for op in cand.graph.ops]
    assert OpType.ADD not in types and OpType.PARAM not in types
    ups = [op for op in cand.graph.ops if op.op_kwargs.get("input_dilation") == [2, 2]]
    assert ups and all(op.type is OpType.CONV for op in ups)
    assert "bias" in cand.variables["params"][ups[0].name]
    if name == "linen_conv_transpose":
        assert ups[1].op_kwargs["use_bias"] is False
        assert "bias" not in cand.variables["params"][ups[1].name]


@pytest.mark.parametrize("name", NAMES)
def test_properties_infer_and_a_forced_mutation_gives_a_valid_child(imported, name):
    _, _, cand = imported(name)
    x = models.example()
    child = models.infer_and_mutate(cand, x)
    assert child is not None and child.graph != cand.graph
    out = Model(child.graph, child.constants).apply(child.variables, x)
    assert out.shape == (2, 10) and bool(jnp.all(jnp.isfinite(out)))


@pytest.mark.parametrize("name", ["linen_einsums", "linen_conv_transpose"])
def test_training_steps_give_the_original_losses(imported, name):
    """The kernels moved into DenseGeneral's layout and the fused biases train as the
    original's do: a few Adam steps from the same weights give the same losses."""
    _, variables, cand = imported(name)
    model = CLASSES[name]()
    ir = Model(cand.graph, cand.constants)
    x, labels = models.example(), jnp.arange(models.SHAPE[0]) % 10

    def losses(apply, params):
        tx = optax.adam(1e-2)
        state = tx.init(params)

        def loss_fn(p):
            return optax.softmax_cross_entropy_with_integer_labels(apply(p), labels).mean()

        grad_fn = jax.jit(jax.value_and_grad(loss_fn))
        out = []
        for _ in range(4):
            loss, grads = grad_fn(params)
            updates, state = tx.update(grads, state, params)
            params = optax.apply_updates(params, updates)
            out.append(float(loss))
        return out

    theirs = losses(lambda p: model.apply({"params": p}, x), variables["params"])
    ours = losses(lambda p: ir.apply({"params": p}, x, training=True),
                  jax.tree.map(jnp.asarray, cand.variables["params"]))
    np.testing.assert_allclose(ours, theirs, rtol=1e-3)
    assert theirs[-1] < theirs[0]


@pytest.mark.parametrize("cls, message", [
    (layer_models.LinenEmbed, r"^nas.from_flax: layer Embed_0 \(flax.linen.Embed\): an "
                              r"embedding lookup \(a gather at integer indices\) has no IR op"),
    (layer_models.NnxEmbed, r"^nas.from_flax: layer embed \(flax.nnx.Embed\): an embedding "
                            r"lookup"),
    (layer_models.CircularConvTranspose, r"^nas.from_flax: layer ConvTranspose_0 "
                                         r"\(flax.linen.ConvTranspose\): circular padding "
                                         r"has no IR op$"),
    (layer_models.WeightNormed, r"^nas.from_flax: layer Conv_0 \(flax.linen.Conv\): its "
                                r"'kernel' is computed from other parameters .*WeightNorm"),
])
def test_layers_without_an_ir_op_are_refused_in_one_line(cls, message):
    model = cls(rngs=nnx.Rngs(0)) if issubclass(cls, nnx.Module) else cls()
    with pytest.raises(ValueError, match=message) as excinfo:
        nas.from_flax(model, models.example())
    assert "\n" not in str(excinfo.value)


def test_a_layer_given_its_own_matmul_imports_what_that_computes():
    model, x = layer_models.InjectedDots(), models.example()
    variables = model.init(jax.random.PRNGKey(1), x)
    cand = nas.from_flax(model, x, variables=variables)
    assert OpType.SCALAR_MUL in [op.type for op in cand.graph.ops]
    want = np.asarray(model.apply(variables, x))
    assert np.max(np.abs(np.asarray(cand(x)) - want)) <= 1e-4 * np.max(np.abs(want))
    with pytest.raises(ValueError, match=r"^nas.from_flax: InjectedDots/Dense_0 .*primitive "
                                         r"'round' has no IR equivalent") as excinfo:
        nas.from_flax(layer_models.InjectedDots(rounded=True), x)
    assert "\n" not in str(excinfo.value)


@pytest.mark.parametrize("spec, kernel_shape", [
    ("btd,td->btd", (16, 12)),  # t in input, kernel and output: a per-token weight
    ("btd,dk->bk", (12, 5)),  # t summed away without the kernel
    ("btd,dk->bkt", (12, 5)),  # output order DenseGeneral cannot give
    ("...d,dk->...k", (12, 5)),  # an ellipsis
    ("btd,dk", (12, 5)),  # implicit output
    ("btd,dd->btd", (12, 12)),  # a label repeated in the kernel
])
def test_einsums_that_are_no_dense_general_are_left_to_the_primitives(spec, kernel_shape):
    assert as_dense_general(spec, 3, np.zeros(kernel_shape), None) is None


def test_an_einsum_bias_must_cover_the_features():
    kernel = np.zeros((12, 4, 5))
    assert as_dense_general("btd,dnh->btnh", 3, kernel, np.zeros(4)) is None
    found = as_dense_general("btd,dnh->btnh", 3, kernel, np.ones((4, 5)))
    assert found is not None and found.features == (4, 5) and found.axis == (-1,)
    assert found.bias.shape == (4, 5)
