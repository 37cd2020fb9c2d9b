"""`export_flax` of an NNX seed writes NNX code (`api="nnx"`, the seed's by default): `Model`
is a plain nnx.Module, its layers attributes built in `__init__` and `__call__` one line per
op, that runs without nas with the interpreter's logits, gradients and batch statistics,
and trains with `nnx.grad` and `nnx.Optimizer`. Every NNX model of the import tests, a
child a search's mutation made of the ConvNeXt-style one (a layer scale held directly by
the module), and the graph of every op type (`api="nnx"` asked for) run in one subprocess
(`exported_runner.py`, its "nnx" runner)."""

from __future__ import annotations

import ast
import importlib.util

import flax.serialization
import jax
import numpy as np
import pytest
from flax import nnx

import nas
from nas.graph import Model
from nas.graph.ops import OpType, new_graph, new_op
from nas.interop.flax_code import model_source
from nas.io.candidate import ExportedCandidate
from nas.mutation import NoChildFound, propose_child
from tests.interop import models
from tests.interop.exported_runner import run_without_nas
from tests.interop.helpers import random_variables
from tests.interop.test_flax_export import every_op_type

# The ViT is the slowest to export and compile; the other NNX models hold its layer kinds.
NAMES = [*models.NNX, "convnext_child", "every_op"]
CASES = [pytest.param(n, marks=pytest.mark.slow) if n == "vit" else n for n in NAMES]
# The ops an NNX Model holds as attributes: layers, parameters, stochastic depth.
HELD = (OpType.PARAM, OpType.CONV, OpType.DENSE, OpType.DENSE_GENERAL, OpType.BATCH_NORM,
        OpType.LAYER_NORM, OpType.GROUP_NORM, OpType.DROPOUT, OpType.SELF_ATTENTION)


def _candidate(name):
    if name == "every_op":
        graph, constants = every_op_type()
        return ExportedCandidate(path=name, graph=graph, constants=constants,
                                 variables=random_variables(graph, constants, (8, 8, 3)),
                                 input_shape=(8, 8, 3))
    if name == "convnext_child":
        seed = _candidate("convnext")
        for s in range(20):
            try:
                child = propose_child(seed.graph, seed.constants, seed.variables, seed=s,
                                      config={"linear_p": None})
            except NoChildFound:
                continue
            if any(op.type is OpType.PARAM for op in child.graph.ops):
                return ExportedCandidate(
                    path=name, graph=child.graph, constants=child.constants,
                    variables=jax.tree.map(np.asarray, child.variables),
                    input_shape=seed.input_shape, info=dict(seed.info))
        raise AssertionError("no child of the ConvNeXt import kept its layer scale in 20 seeds")
    module, _, kwargs = models.build(name)
    return nas.from_flax(module, models.example(), **kwargs)


def _interpreter(cand, batch, labels):
    """What the runner measures, as the interpreter computes it."""
    model = Model(cand.graph, cand.constants)
    variables = dict(cand.variables)

    def loss(params):
        logits = model.apply({**variables, "params": params}, batch, deterministic=True,
                             training=False)
        log_p = jax.nn.log_softmax(logits)
        return -jax.numpy.mean(jax.numpy.take_along_axis(log_p, labels[:, None], axis=1))

    # jitted, as the trainers run it: eagerly each op compiles on its own
    grads = jax.jit(jax.grad(loss))(variables["params"])
    train, updates = jax.jit(lambda v: model.apply(v, batch, deterministic=True, training=True,
                                                   mutable=["batch_stats"]))(variables)
    out = {"logits": jax.jit(lambda v: model.apply(v, batch, deterministic=True,
                                                   training=False))(variables),
           "train_logits": train}
    for prefix, tree in (("grad", grads), ("stats", dict(updates).get("batch_stats", {}))):
        for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
            out[f"{prefix}:" + "/".join(str(k.key) for k in path)] = leaf
    return {k: np.asarray(v) for k, v in out.items()}


class _Exports(dict):
    """{name: (candidate, export dir, inputs, the runner's results)}, exported and run on
    first use in two groups: the ViT alone (its tests are slow) and every other model."""

    def __init__(self, root):
        super().__init__()
        self.root = root

    def __missing__(self, name):
        group = ["vit"] if name == "vit" else [n for n in NAMES if n != "vit"]
        root = self.root / ("vit" if name == "vit" else "rest")
        rng = np.random.default_rng(0)
        cands = {}
        for n in group:
            cand = cands[n] = _candidate(n)
            assert cand.info.get("api") == (None if n == "every_op" else "nnx")
            nas.export_flax(cand, root / n / "code", api="nnx" if n == "every_op" else None)
            batch = rng.normal(size=(4, *cand.input_shape)).astype(np.float32)
            np.savez(root / n / "inputs.npz", batch=batch, labels=rng.integers(0, 10, size=4))
        run_without_nas(root, "nnx")
        for n, cand in cands.items():
            self[n] = (cand, root / n / "code", dict(np.load(root / n / "inputs.npz")),
                       dict(np.load(root / n / "result.npz")))
        return self[name]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    return _Exports(tmp_path_factory.mktemp("nnx_export"))


@pytest.mark.parametrize("name", CASES)
def test_exported_nnx_code_computes_what_the_interpreter_computes(exported, name):
    cand, _, inputs, got = exported[name]
    want = _interpreter(cand, inputs["batch"], inputs["labels"])
    assert got["is_nnx"]
    assert sorted(k for k in got if k.startswith(("grad:", "stats:"))) == sorted(
        k for k in want if k.startswith(("grad:", "stats:")))
    for key, value in want.items():
        np.testing.assert_allclose(got[key], value, rtol=1e-4, atol=1e-5, err_msg=key)


@pytest.mark.parametrize("name", CASES)
def test_exported_nnx_code_trains_with_nnx_optimizer(exported, name):
    _, _, _, got = exported[name]
    assert np.isfinite(got["train_loss_after"])
    assert got["train_loss_after"] < got["train_loss"]


@pytest.mark.parametrize("name", CASES)
def test_the_code_is_nnx_layers_in_init_and_one_call_line_per_op(exported, name):
    cand, code, _, _ = exported[name]
    source = (code / "model.py").read_text()
    tree = ast.parse(source)
    imports = [ast.unparse(n) for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)]
    assert "from flax import nnx" in imports and not any("linen" in i for i in imports)
    model = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model")
    text = ast.get_source_segment(source, model)
    assert "bridge" not in text and "nn." not in text.replace("nnx.", "")
    assert [ast.unparse(b) for b in model.bases] == ["nnx.Module"]
    methods = {f.name: f for f in model.body if isinstance(f, ast.FunctionDef)}
    assert set(methods) == {"__init__", "__call__"}
    held = [op for op in cand.graph.ops
            if op.type in HELD or _drop_rate(op, cand.constants) > 0]
    inits = [ast.unparse(s) for s in methods["__init__"].body]
    assert len(inits) == len(held)
    assert all(line.startswith("self.") and ("= nnx." in line) for line in inits)
    if any(op.type is OpType.PARAM for op in held):
        assert any("= nnx.Param(" in line for line in inits)
    body = methods["__call__"].body
    assert len(body) == len(cand.graph.ops) + 1 and isinstance(body[-1], ast.Return)
    assert all(isinstance(s, ast.Assign) for s in body[:-1])


def _drop_rate(op, constants):
    rate = op.input_kwargs.get("layer_drop_rate", 0.0)
    return float(constants[rate[2:]] if isinstance(rate, str) else rate)


def _module(code, name):
    spec = importlib.util.spec_from_file_location(f"nnx_{name}", code / "model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with open(code / "variables.msgpack", "rb") as f:
        return module, flax.serialization.msgpack_restore(f.read())


def test_from_variables_loads_a_parameter_held_directly_by_an_op(exported):
    cand, code, inputs, _ = exported["convnext"]
    module, variables = _module(code, "convnext")
    param = next(op.name for op in cand.graph.ops if op.type is OpType.PARAM)
    assert isinstance(variables["params"][param], np.ndarray)
    model = module.from_variables(variables)
    attr = module.OP_ATTRIBUTES[param]
    np.testing.assert_array_equal(getattr(model, attr)[...], variables["params"][param])


def _values(state):
    """A state's leaves as numpy arrays, random keys as their key data."""
    return [np.asarray(jax.random.key_data(v) if jax.dtypes.issubdtype(v.dtype,
                                                                       jax.dtypes.prng_key)
                       else v) for v in jax.tree.leaves(state)]


def test_from_variables_holds_what_a_model_built_with_the_same_rngs_holds(exported):
    """`from_variables` makes only the shapes of Model's initial weights; the random streams
    of its dropout layers, and the caller's `rngs` after it, are those of a Model built with
    the same `rngs`: in training mode both draw the same dropout."""
    _, code, inputs, _ = exported["every_op"]
    module, variables = _module(code, "every_op")
    mine, theirs = nnx.Rngs(0, dropout=1), nnx.Rngs(0, dropout=1)
    model = module.from_variables(variables, rngs=mine)
    built = module.Model(rngs=theirs)
    nnx.update(built, nnx.state(model, (nnx.Param, nnx.BatchStat)))
    for a, b in zip(_values(nnx.state(model)), _values(nnx.state(built)), strict=True):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(_values(nnx.state(mine)), _values(nnx.state(theirs)), strict=True):
        np.testing.assert_array_equal(a, b)
    model.train()
    built.train()
    call = nnx.jit(lambda m, x: m(x))
    np.testing.assert_array_equal(call(model, inputs["batch"]), call(built, inputs["batch"]))


def test_from_variables_refuses_bad_variables_in_one_line_naming_them(exported):
    _, code, _, _ = exported["cnn"]
    module, variables = _module(code, "cnn")
    params, stats = dict(variables["params"]), variables["batch_stats"]
    with pytest.raises(ValueError, match=r"^variables: no value for bn\.mean \(and 1 more "
                                         r"of Model's variables\)$"):
        module.from_variables({"params": params})
    bad = {**params, "head": {**params["head"], "bias": np.zeros(3, np.float32)}}
    with pytest.raises(ValueError, match=r"^variables params/head/bias: shape \(3,\), "
                                         r"Model's is \(10,\)$"):
        module.from_variables({"params": bad, "batch_stats": stats})
    with pytest.raises(ValueError, match=r"^variables\['params'\]\['nope'\]: Model has no "
                                         r"op 'nope'$"):
        module.from_variables({"params": {**params, "nope": {}}, "batch_stats": stats})
    with pytest.raises(ValueError, match=r"^variables params/head/gamma: Model has no such "
                                         r"variable$"):
        module.from_variables({"params": {**params, "head": {**params["head"], "gamma": 1.0}},
                               "batch_stats": stats})


def test_linen_code_for_an_nnx_seed_on_request_and_a_bad_api_is_one_line(exported, tmp_path):
    cand = exported["cnn"][0]
    text = (nas.export_flax(cand, tmp_path / "linen", api="linen") / "model.py").read_text()
    assert "class Model(nn.Module):" in text and "nnx" not in text
    with pytest.raises(ValueError, match=r"^export_flax: api must be 'linen' or 'nnx', got "
                                         r"'torch'$"):
        nas.export_flax(cand, tmp_path / "bad", api="torch")


@pytest.mark.parametrize(("op", "message"), [
    (new_op("blk/ln", "LAYER_NORM", ["input"],
            op_kwargs={"feature_axes": [-2, -1], "reduction_axes": [-2, -1]}),
     r"op 'blk/ln' kwarg 'feature_axes': \(-2, -1\) names several axes; nnx\.LayerNorm "
     r"normalizes over features of one axis"),
    (new_op("blk/d", "DENSE_GENERAL", ["input"],
            op_kwargs={"features": 4, "batch_dims": [0], "axis": -1}),
     r"op 'blk/d' kwarg 'batch_dims': nnx\.LinearGeneral has no such argument, so NNX code "
     r"cannot carry \(0,\); export it with api='linen'"),
])
def test_an_op_nnx_layers_cannot_express_is_one_line_naming_it(op, message):
    graph = new_graph(["input"], ["out"], [op, new_op("out", "IDENTITY", [op.name])])
    with pytest.raises(ValueError, match=f"^{message}$"):
        model_source(graph, {}, (4, 8), api="nnx")
    assert "class Model(nn.Module)" in model_source(graph, {}, (4, 8), api="linen")
