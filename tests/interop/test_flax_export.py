"""`nas.export_flax`: the written code, run where `nas` cannot be imported, computes what the
IR interpreter computes: inference logits, and a training forward pass (batch statistics,
dropout, stochastic depth) with its loss, new batch_stats and gradients. One subprocess runs
every model of the module (`exported_runner.py`)."""

from __future__ import annotations

import ast
import os

import jax
import numpy as np
import pytest

import nas
from nas.graph import Model
from nas.graph.ops import OpType, new_graph, new_op
from nas.graph.serialize import graph_to_dict
from nas.interop.flax_code import model_source, python_names
from nas.io.candidate import ExportedCandidate, write_candidate
from nas.mutation import NoChildFound, propose_child
from nas.zoo import build, cnn, resnetv1, vit
from tests.interop.exported_runner import measure, run_without_nas
from tests.interop.helpers import random_variables

ALLOWED_IMPORTS = {"jax", "flax", "numpy", "__future__", "functools", "string", "collections",
                   "typing"}


def every_op_type():
    """A small graph that uses every op type the interpreter knows, with symbolic kwargs
    (`S:`, `K:`, "B"), a grouped conv, max/avg pools with padding, stochastic depth, dropout
    and attention dropout, batch norm, parameters used directly."""
    ops = [
        new_op("stem/conv", "CONV", ["input"], op_kwargs={"features": 8, "kernel_size": 3}),
        new_op("stem/bn", "BATCH_NORM", ["stem/conv"], op_kwargs={"momentum": 0.8}),
        new_op("stem/act", "SWISH", ["stem/bn"]),
        new_op("gconv", "CONV", ["stem/act"], op_kwargs={
            "features": "S:-1*2", "kernel_size": [3, 3], "feature_group_count": 4,
            "kernel_init": "I:variance_scaling:scale:2.0:mode:fan_in:distribution:normal"}),
        new_op("gn", "GROUP_NORM", ["gconv"], op_kwargs={"num_groups": 4}),
        new_op("gelu", "GELU", ["gn"], input_kwargs={"approximate": False}),
        new_op("tanh", "TANH", ["gelu"]),
        new_op("hswish", "HARD_SWISH", ["tanh"]),
        new_op("leaky", "LEAKY_RELU", ["hswish"], input_kwargs={"negative_slope": 0.2}),
        new_op("elu", "ELU", ["leaky"], input_kwargs={"alpha": 0.5}),
        new_op("relu6", "RELU6", ["elu"]),
        new_op("pool", "MAX_POOL", ["relu6"], input_kwargs={
            "window_shape": 3, "strides": 2, "padding": "SAME"}),
        new_op("avg", "AVG_POOL", ["pool"], input_kwargs={
            "window_shape": [2, 2], "strides": [1, 1], "padding": [[0, 1], [1, 0]]}),
        new_op("skip/drop", "STOCH_DEPTH", ["avg"], input_kwargs={"layer_drop_rate": 0.25}),
        new_op("res", "ADD", ["skip/drop", "pool"], input_kwargs={"layer_drop_rate": "K:drop"}),
        new_op("se/mean", "MEAN", ["res"], input_kwargs={"axis": [1, 2], "keepdims": True}),
        new_op("se/dense", "DENSE", ["se/mean"], op_kwargs={"features": "S:-1%4"}),
        new_op("se/relu", "RELU", ["se/dense"]),
        new_op("se/expand", "DENSE", ["se/relu"], op_kwargs={"features": "S:res:-1"}),
        new_op("se/sigmoid", "SIGMOID", ["se/expand"]),
        new_op("se/reshape", "RESHAPE", ["se/sigmoid"],
               input_kwargs={"new_shape": ["B", 1, 1, "S:-1"]}),
        new_op("se/mul", "MUL", ["res", "se/reshape"]),
        new_op("global", "MAX_POOL", ["se/mul"], input_kwargs={"window_shape": 0}),
        new_op("tokens", "RESHAPE", ["se/mul"], input_kwargs={"new_shape": ["B", -1, "S:-1"]}),
        new_op("swap", "TRANSPOSE", ["tokens"], input_kwargs={"axes": [0, 2, 1]}),
        new_op("mix", "DENSE_GENERAL", ["swap"], op_kwargs={"features": "S:-1", "axis": -1}),
        new_op("swap_back", "TRANSPOSE", ["mix"], input_kwargs={"axes": [0, 2, 1]}),
        new_op("ln", "LAYER_NORM", ["swap_back"], op_kwargs={"epsilon": 1e-5}),
        new_op("attn", "SELF_ATTENTION", ["ln"], op_kwargs={"num_heads": 2,
                                                             "dropout_rate": 0.2}),
        new_op("scale", "PARAM", [], input_kwargs={"init_fn": "I:normal:stddev:0.1",
                                                   "shape": [1, 1, "K:width"]}),
        new_op("layer_scale", "MUL", ["attn", "scale"]),
        new_op("half", "SCALAR_MUL", ["layer_scale"], input_kwargs={"const": 0.5}),
        new_op("rsqrt", "SCALAR_MUL", ["half"]),
        new_op("shift", "SCALAR_ADD", ["rsqrt"], input_kwargs={"const": "K:shift"}),
        new_op("drop", "DROPOUT", ["shift"], op_kwargs={"rate": 0.3}),
        new_op("frozen", "NONE", ["drop"]),
        new_op("same", "IDENTITY", ["frozen"]),
        new_op("w", "PARAM", [], input_kwargs={"init_fn": "I:lecun_normal",
                                               "shape": [16, 10]}),
        new_op("proj", "EINSUM", ["same", "w"], input_kwargs={"sum": "btd,dk->btk"}),
        new_op("pooled", "MEAN", ["proj"], input_kwargs={"axis": 1}),
        new_op("flat", "FLATTEN", ["global"]),
        new_op("flat/dense", "DENSE", ["flat"], op_kwargs={"features": 10}),
        new_op("both", "ADD", ["pooled", "flat/dense"]),
        new_op("cat", "CONCAT", ["pooled", "flat/dense", "both"], input_kwargs={"axis": 1}),
        new_op("v", "PARAM", [], input_kwargs={"init_fn": "I:orthogonal", "shape": [30, 10]}),
        new_op("dot", "DOT_GENERAL", ["cat", "v"],
               input_kwargs={"dimension_numbers": [[[1], [0]], [[], []]]}),
        new_op("soft", "SOFTMAX", ["dot"], input_kwargs={"axis": -1}),
        new_op("logits", "ADD", ["dot", "soft"]),
    ]
    constants = {"drop": 0.1, "shift": 0.25, "width": 16}
    return new_graph(["input"], ["logits"], ops), constants


def _child():
    """A child of the README CifarNet made by mutation, as a search makes one."""
    graph, constants, _ = cnn.CifarNet()
    variables = random_variables(graph, constants, (32, 32, 3))
    for seed in range(20):
        try:
            child = propose_child(graph, constants, variables, seed=seed,
                                  config={"linear_p": None})
        except NoChildFound:
            continue
        return child.graph, child.constants, jax.tree.map(np.asarray, child.variables)
    raise AssertionError("no child of CifarNet in 20 seeds")


def _model(name):
    """(graph, constants, variables, input_shape) of one test model."""
    if name == "every_op":
        graph, constants = every_op_type()
        shape = (8, 8, 3)
    elif name == "cifarnet":
        graph, constants, _ = cnn.CifarNet()
        shape = (32, 32, 3)
    elif name == "resnet18":
        graph, constants, _ = resnetv1.ResNet18(num_classes=10, input_resolution="small",
                                                num_filters=8)
        shape = (16, 16, 3)
    elif name == "vit":
        graph, constants, _ = vit.base_vit(4, 16, 1, 32, 2, image_size=16, num_classes=10,
                                           dropout=0.1)
        shape = (16, 16, 3)
    elif name in ("b0", "revnet"):  # depthwise convs and stochastic depth; reversible
        graph, constants, _ = build(name, 10, 32)
        shape = (32, 32, 3)
    elif name == "imported":  # a linen ResNet (batch norm, residual adds) via nas.from_flax
        from tests.interop import models

        module, variables, kwargs = models.build("resnet")
        cand = nas.from_flax(module, models.example(), variables=variables, **kwargs)
        return cand.graph, cand.constants, cand.variables, tuple(cand.input_shape)
    elif name == "imported_layers":  # Einsums as DenseGeneral, transposed convolutions
        from flax import linen as nn

        from tests.interop import layer_models, models

        class EinsumsThenUp(nn.Module):
            @nn.compact
            def __call__(self, x):
                return layer_models.LinenEinsums()(x) + layer_models.LinenConvTranspose()(x)

        module = EinsumsThenUp()
        variables = module.init(jax.random.PRNGKey(1), models.example())
        cand = nas.from_flax(module, models.example(), variables=variables)
        return cand.graph, cand.constants, cand.variables, tuple(cand.input_shape)
    else:
        graph, constants, variables = _child()
        return graph, constants, variables, (32, 32, 3)
    return graph, constants, random_variables(graph, constants, shape), shape


def _ir_apply(graph, constants):
    def apply(v, x, train, **kw):
        return Model(graph, constants).apply(v, x, deterministic=not train, training=train,
                                             **kw)
    return apply


def _export_and_run(root, names, grads):
    """Every model exported and run by the runner in one `python -I -B` subprocess (no
    site, no PYTHONPATH, no bytecode written beside model.py); returns
    {name: (graph, constants, variables, export dir, inputs, the runner's results)}."""
    models = {name: _model(name) for name in names}
    rng = np.random.default_rng(0)
    for i, (name, (graph, constants, variables, shape)) in enumerate(models.items()):
        cand = ExportedCandidate(path=name, graph=graph, constants=constants,
                                 variables=variables, input_shape=shape)
        assert nas.export_flax(cand, root / name / "code") == root / name / "code"
        batch = rng.normal(size=(3, *shape)).astype(np.float32)
        labels = rng.integers(0, 10, size=3)
        np.savez(root / name / "inputs.npz", batch=batch, labels=labels, seed=i, grads=grads)
    run_without_nas(root)
    out = {}
    for name, (graph, constants, variables, _) in models.items():
        inputs = dict(np.load(root / name / "inputs.npz"))
        result = dict(np.load(root / name / "result.npz"))
        out[name] = (graph, constants, variables, root / name / "code", inputs, result)
    return out


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """The default models, inference and training forward passes."""
    return _export_and_run(tmp_path_factory.mktemp("flax_export"),
                           ["every_op", "cifarnet", "vit", "child", "imported",
                            "imported_layers"], grads=False)


@pytest.fixture(scope="module")
def exported_with_grads(tmp_path_factory):
    """Larger models, and gradients too (compiling backward passes takes minutes)."""
    return _export_and_run(tmp_path_factory.mktemp("flax_export_grads"),
                           ["every_op", "resnet18", "vit", "child", "b0", "revnet"],
                           grads=True)


def _close(got, want, rtol):
    """Equal to `rtol` relative to the largest magnitude of `want`."""
    scale = max(float(np.max(np.abs(want))), 1e-30) if want.size else 1.0
    assert got.shape == want.shape
    return float(np.max(np.abs(got - want), initial=0.0)) <= rtol * scale


def _check_same(entry, name, grads):
    graph, constants, variables, _, inputs, result = entry
    want = measure(_ir_apply(graph, constants), variables, inputs["batch"], inputs["labels"],
                   jax.random.PRNGKey(int(inputs["seed"])), grads)
    assert sorted(result) == sorted(want)
    assert _close(result["logits"], want["logits"], 1e-5), name
    assert _close(result["train_logits"], want["train_logits"], 1e-5), name
    assert abs(float(result["loss"]) - float(want["loss"])) <= 1e-5 * abs(float(want["loss"]))
    for key in want:
        if key.startswith("['batch_stats']"):
            assert _close(result[key], want[key], 1e-5), key
        elif key.startswith("['grads']"):
            assert _close(result[key], want[key], 1e-4), key
    assert any(k.startswith("['grads']") for k in want) == grads
    if name in ("every_op", "resnet18", "vit", "b0"):  # batch norm or dropout
        assert not np.allclose(want["train_logits"], want["logits"])
    if name in ("every_op", "resnet18", "b0"):
        assert any(k.startswith("['batch_stats']") for k in want)


@pytest.mark.parametrize("name", ["every_op", "cifarnet", "vit", "child", "imported",
                                  "imported_layers"])
def test_exported_code_computes_what_the_interpreter_computes(exported, name):
    _check_same(exported[name], name, grads=False)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["every_op", "resnet18", "vit", "child", "b0", "revnet"])
def test_exported_code_has_the_interpreter_gradients(exported_with_grads, name):
    _check_same(exported_with_grads[name], name, grads=True)


@pytest.mark.parametrize("name", ["every_op", "cifarnet"])
def test_the_exported_train_step_is_the_interpreter_program(exported, name):
    """Why the exported code trains as fast as the interpreter: its jitted training step
    (forward with batch statistics and dropout, gradient) lowers to the same StableHLO
    text (traced only, nothing compiles)."""
    import importlib.util

    graph, constants, variables, code, inputs, _ = exported[name]
    spec = importlib.util.spec_from_file_location(f"lowered_{name}", code / "model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    def lowered(apply):
        def loss(params, x, key):
            logits, new = apply({**variables, "params": params}, x, key)
            return jax.numpy.mean(logits ** 2), new
        return jax.jit(jax.value_and_grad(loss, has_aux=True)).lower(
            variables["params"], inputs["batch"], jax.random.PRNGKey(0)).as_text()

    ir = lowered(lambda v, x, k: Model(graph, constants).apply(
        v, x, deterministic=False, training=True, mutable=["batch_stats"], rngs={"dropout": k}))
    mine = lowered(lambda v, x, k: module.Model().apply(
        v, x, train=True, mutable=["batch_stats"], rngs={"dropout": k}))
    assert mine == ir


def test_the_code_is_one_line_per_op_importing_only_jax_flax_numpy(exported):
    graph, _, variables, code, _, _ = exported["every_op"]
    source = (code / "model.py").read_text()
    imported = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add(node.module.split(".")[0])
    assert imported <= ALLOWED_IMPORTS, imported
    assert {"jax", "flax"} <= imported
    assert "class Model(nn.Module):" in source
    assert "def __call__(self, x: jax.Array, train: bool = False)" in source
    body = source[source.index("def __call__"):source.index("        return logits")]
    lines = [ln.strip() for ln in body.splitlines()[2:]]
    assert len(lines) == len(graph.ops)
    names = python_names(graph, "input:0")
    assert names["global:0"] == "op_global"  # a keyword
    for op, line in zip(graph.ops, lines, strict=True):
        assert line.startswith(op.name.replace("/", "_") + " = ") or (
            line.startswith(names[op.output_names[0]] + " = ")), (op.name, line)
        assert line.endswith(")") and "  # (" in line, line
    assert "gconv = nn.Conv(features=16, kernel_size=(3, 3), feature_group_count=4" in source
    assert "# (B, 4, 4, 16)" in source and "# (1, 1, 16)" in source
    assert "_stochastic_depth(self, avg, 0.25, not train)" in source
    assert "jnp.reshape(se_sigmoid, (se_sigmoid.shape[0], 1, 1, 16))" in source
    assert "gelu = nn.gelu(gn, approximate=False)" in source
    assert "leaky = nn.leaky_relu(hswish, negative_slope=0.2)" in source
    assert "cat = jnp.concatenate([pooled, flat_dense, both], axis=1)  # (B, 30)" in source
    assert "se_mean = jnp.mean(res, axis=(1, 2), keepdims=True)  # (B, 1, 1, 16)" in source
    assert sorted(os.listdir(code)) == ["model.py", "variables.msgpack"]
    from flax import serialization

    stored = serialization.msgpack_restore((code / "variables.msgpack").read_bytes())
    assert jax.tree.structure(stored) == jax.tree.structure(variables)
    for a, b in zip(jax.tree.leaves(stored), jax.tree.leaves(variables), strict=True):
        assert a.dtype == b.dtype and np.array_equal(a, b)


def test_export_from_a_candidate_file_names_it_in_errors(tmp_path):
    graph, constants, _ = cnn.CifarNet()
    variables = random_variables(graph, constants, (32, 32, 3))
    path = write_candidate(tmp_path / "c.zip", graph_to_dict(graph, constants), variables,
                           input_shape=(32, 32, 3))
    out = nas.export_flax(str(path), tmp_path / "code")
    assert sorted(os.listdir(out)) == ["model.py", "variables.msgpack"]
    assert "INPUT_SHAPE = (32, 32, 3)" in (out / "model.py").read_text()
    no_weights = write_candidate(tmp_path / "w.zip", graph_to_dict(graph, constants), None,
                                 input_shape=(32, 32, 3))
    with pytest.raises(ValueError, match=r"w\.zip: the candidate was exported without "):
        nas.export_flax(no_weights, tmp_path / "none")
    with pytest.raises(ValueError, match="not empty"):
        nas.export_flax(path, out)
    (tmp_path / "afile").write_text("x")
    with pytest.raises(ValueError, match="afile: exists and is not a directory"):
        nas.export_flax(path, tmp_path / "afile")
    with pytest.raises(ValueError, match="expected an exported candidate or its path, got "
                                         "dict"):
        nas.export_flax({"graph": graph}, tmp_path / "dict")
    with pytest.raises(ValueError, match="cannot read an exported candidate"):
        nas.export_flax(tmp_path / "missing.zip", tmp_path / "missing")
    assert sorted(os.listdir(tmp_path)) == ["afile", "c.zip", "code", "w.zip"]


def test_refusals_are_one_line_naming_the_op_and_write_nothing(tmp_path):
    ops = [new_op("flat", "RESHAPE", ["input"], input_kwargs={"new_shape": ["S:0", -1]}),
           new_op("head", "DENSE", ["flat"], op_kwargs={"features": 10})]
    graph = new_graph(["input"], ["head"], ops)
    variables = random_variables(graph, {}, (4, 4, 3))
    cand = ExportedCandidate(path="cand.zip", graph=graph, constants={}, variables=variables,
                             input_shape=(4, 4, 3))
    with pytest.raises(ValueError) as info:
        nas.export_flax(cand, tmp_path / "out")
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("cand.zip: op 'flat' kwarg 'new_shape': ['S:0', -1] depends "
                              "on the batch size ((2, -1) at batch 2, (3, -1) at batch 3)")
    two = new_graph(["a", "b"], ["sum"], [new_op("sum", "ADD", ["a", "b"])])
    with pytest.raises(ValueError, match=r"inputs \['a', 'b'\].*exactly one of each"):
        model_source(two, {}, (4,))
    cand = ExportedCandidate(path="old.json", graph=graph, constants={}, variables=variables)
    with pytest.raises(ValueError, match="old.json: the candidate has no input_shape"):
        nas.export_flax(cand, tmp_path / "out")
    assert os.listdir(tmp_path) == []


def test_every_op_type_has_a_rule():
    graph, _ = every_op_type()
    assert {op.type for op in graph.ops} == set(OpType)
