"""Fitting a child's new ops to the tensors they replace, before it trains."""

import jax
import numpy as np
import pytest

from nas.graph import Model, new_graph, new_op
from nas.mutation import propose_child
from nas.search.execution.task import Task
from nas.train.fit import (
    ConstantOutputError,
    FitConfig,
    check_varies,
    fit_new_ops,
    replaced_tensors,
    resized_in_place,
)
from nas.zoo import cnn
from tests.mutation.helpers import parent_variables

CONFIG = {"linear_p": None, "time_limit_s": 600.0}  # never binding, even at load


def _child_with_new_params(graph, constants, variables, new_type=None, image_size=32):
    """The first proposed child with new parameters (of an op of `new_type`, if given),
    proposed at `image_size` as the driver proposes at the training images' size: a child
    proposed at another size has variables the trained model cannot use."""
    config = {**CONFIG, "input_shape": (1, image_size, image_size, 3)}
    for seed in range(20):
        child = propose_child(graph, constants, variables, seed=seed, config=config)
        types = {op.type.name for op in child.graph.ops if op.name in set(child.new)}
        if child.kind == "subgraph" and child.new and new_type in types | {None}:
            return child
    raise AssertionError(f"no child with new parameters ({new_type or 'any'}) in 20 seeds")


def test_fit_moves_new_ops_towards_the_parent_and_keeps_inherited_ones():
    graph, constants, _ = cnn.CifarNet()
    variables = parent_variables(graph, constants)
    child = _child_with_new_params(graph, constants, variables)
    pairs = replaced_tensors(child.spec)
    assert pairs and all(old in {n for op in graph.ops for n in op.output_names}
                         for _, old in pairs)
    rng = np.random.default_rng(0)
    images = [rng.standard_normal((8, 32, 32, 3)).astype(np.float32) for _ in range(2)]
    fitted, info = fit_new_ops((graph, constants, variables),
                               (child.graph, child.constants, child.variables),
                               child.new, pairs, images, FitConfig(steps=30, lr=3e-3))
    assert info["mse_after"] < 0.7 * info["mse_before"], info
    for name in child.inherited:
        same = jax.tree.map(np.array_equal, fitted["params"][name],
                            child.variables["params"][name])
        assert all(jax.tree.leaves(same)), name
    changed = [name for name in child.new if not all(jax.tree.leaves(jax.tree.map(
        np.array_equal, fitted["params"][name], child.variables["params"][name])))]
    assert changed


def test_nothing_to_fit_returns_the_variables_unchanged():
    graph, constants, _ = cnn.CifarNet()
    variables = parent_variables(graph, constants)
    out, info = fit_new_ops((graph, constants, variables), (graph, constants, variables),
                            [], [("proj:0", "proj:0")], [np.zeros((1, 32, 32, 3))],
                            FitConfig())
    assert info == {} and out["params"].keys() == variables["params"].keys()


def _stem(first_ops, first_out):
    ops = [*first_ops, new_op("relu", "RELU", [first_out]),
           new_op("flatten", "FLATTEN", ["relu"]),
           new_op("logits", "DENSE", ["flatten"], op_kwargs={"features": 10})]
    graph = new_graph(["input"], ["logits"], ops)
    return graph, Model(graph, {}).init(jax.random.PRNGKey(0), np.zeros((1, 8, 8, 3)))


@pytest.mark.parametrize("grey", [True, False])
def test_a_new_subgraph_whose_output_ignores_the_image_is_refused(grey):
    parent, p_vars = _stem([new_op("conv", "CONV", ["input"],
                                   op_kwargs={"features": 4, "kernel_size": 3})], "conv")
    child, c_vars = _stem([new_op("new/ln", "LAYER_NORM", ["input"]),
                           new_op("new/conv", "CONV", ["new/ln"],
                                  op_kwargs={"features": 4, "kernel_size": 1})], "new/conv")
    rng = np.random.default_rng(0)
    images = [rng.standard_normal((8, 8, 8, 1 if grey else 3)).astype(np.float32)
              for _ in range(2)]
    images = [np.repeat(x, 3, axis=-1) if grey else x for x in images]  # grey: R = G = B
    args = ((parent, {}, p_vars), (child, {}, c_vars), {"new/ln", "new/conv"},
            [("new/conv:0", "conv:0")], images, FitConfig(steps=3))
    if grey:  # a layer norm over three equal channels is 0 everywhere: nothing to learn
        with pytest.raises(ConstantOutputError, match="same output for every image"):
            fit_new_ops(*args)
        with pytest.raises(ConstantOutputError, match=r"at conv:0"):  # the driver's check
            check_varies(*args[:2], args[3], images[0])
        # a pair whose shapes differ (3 channels vs 4) is not compared, constant or not
        check_varies(*args[:2], [("new/ln:0", "conv:0")], images[0])
    else:
        assert fit_new_ops(*args)[1]["mse_after"] > 0
        check_varies(*args[:2], args[3], images[0])


@pytest.mark.parametrize("norm, large", [(None, False), ("spatial", False), ("flat", True)])
def test_a_fit_steps_on_batch_size_images_or_bn_batch_size_for_a_flat_batch_norm(norm, large):
    """A new batch norm over features without spatial positions normalizes by statistics of
    the batch's images alone, which need the larger batch; over a feature map they also
    average over its positions."""
    parent, p_vars = _stem([new_op("conv", "CONV", ["input"],
                                   op_kwargs={"features": 4, "kernel_size": 3})], "conv")
    ops = [new_op("new/conv", "CONV", ["input"], op_kwargs={"features": 4, "kernel_size": 1})]
    if norm == "spatial":
        ops.append(new_op("new/bn", "BATCH_NORM", ["new/conv"]))
    if norm == "flat":  # the stem flattens "new/out"'s output: normalize it flat, then
        ops += [new_op("new/flat", "FLATTEN", ["new/conv"]),  # reshape back
                new_op("new/bn", "BATCH_NORM", ["new/flat"]),
                new_op("new/out", "RESHAPE", ["new/bn"],
                       input_kwargs={"new_shape": ("B", 8, 8, 4)})]
    child, c_vars = _stem(ops, ops[-1].name)
    rng = np.random.default_rng(0)
    images = [rng.standard_normal((8, 8, 8, 3)).astype(np.float32) for _ in range(2)]

    def fitted(batch_size, bn_batch_size):
        out, _ = fit_new_ops((parent, {}, p_vars), (child, {}, c_vars),
                             {op.name for op in ops}, [(f"{ops[-1].name}:0", "conv:0")],
                             images, FitConfig(steps=4, batch_size=batch_size,
                                               bn_batch_size=bn_batch_size))
        return out

    def same(a, b):
        return all(jax.tree.leaves(jax.tree.map(np.array_equal, a, b)))

    got, eight, two = fitted(2, 8), fitted(8, 8), fitted(2, 2)
    assert same(got, eight if large else two)
    assert not same(got, two if large else eight)


def test_a_fit_stops_when_its_loss_stops_falling_counted_in_steps_and_repeats_exactly():
    parent, p_vars = _stem([new_op("conv", "CONV", ["input"],
                                   op_kwargs={"features": 4, "kernel_size": 3})], "conv")
    child, c_vars = _stem([new_op("new/conv", "CONV", ["input"],
                                  op_kwargs={"features": 4, "kernel_size": 3})], "new/conv")
    rng = np.random.default_rng(0)
    images = [rng.standard_normal((8, 8, 8, 3)).astype(np.float32) for _ in range(2)]

    def fit(**config):
        return fit_new_ops((parent, {}, p_vars), (child, {}, c_vars), {"new/conv"},
                           [("new/conv:0", "conv:0")], images, FitConfig(**config))

    (a, info), (b, again) = fit(steps=400, patience=4, min_improvement=0.2), fit(
        steps=400, patience=4, min_improvement=0.2)
    assert 4 <= info["steps"] < 400 and info["steps"] % 2 == 0, info  # whole rounds
    assert info == again and all(jax.tree.leaves(jax.tree.map(np.array_equal, a, b)))
    assert fit(steps=6, patience=100)[1]["steps"] == 6


def test_a_shrunk_childs_next_layers_are_fitted_to_their_parents_outputs():
    """After a narrowing, the layers reading the narrowed ones learn to
    do without the dropped units before the child trains."""
    graph, constants, _ = cnn.CifarNet()
    variables = parent_variables(graph, constants)
    child = propose_child(graph, constants, variables, seed=2,
                          config={"shrink_p": 1.0, "input_shape": (1, 32, 32, 3)})
    assert child.kind == "shrink" and {"conv_layer0/conv", "conv_layer1/conv"} <= child.new
    pairs = resized_in_place(child.new)
    assert ("conv_layer1/conv:0", "conv_layer1/conv:0") in pairs
    rng = np.random.default_rng(0)
    images = [rng.standard_normal((16, 32, 32, 3)).astype(np.float32) for _ in range(4)]
    _, info = fit_new_ops((graph, constants, variables),
                          (child.graph, child.constants, child.variables),
                          child.new, pairs, images, FitConfig(steps=40, lr=3e-3))
    assert info["mse_after"] < 0.5 * info["mse_before"], info


def test_replaced_tensors_reads_both_spec_forms():
    spec = [{"op": {"name": "gen1/conv/0"}, "output_names": [None]},
            {"op": {"name": "gen1/relu/1"}, "output_names": ["relu"]}]
    assert replaced_tensors(spec) == [("gen1/relu/1:0", "relu:0")]


@pytest.mark.parametrize("bad, field", [
    ({"steps": -1}, "steps"), ({"lr": 0}, "lr"), ({"batches": 0}, "batches"),
    ({"colour": 1}, "unknown"), ({"steps": 1.5}, "steps"),
    ({"bn_batch_size": 0}, "bn_batch_size"), ({"patience": 0}, "patience"),
    ({"min_improvement": 1.5}, "min_improvement")])
def test_bad_fit_config_names_the_field(bad, field):
    with pytest.raises(ValueError, match=field):
        FitConfig.from_dict(bad)


def test_fitting_steps_run_the_new_ops_and_what_depends_on_them_only():
    """The frozen network before the new ops is computed once per batch, not per step."""
    from nas.train.fit import _fitted_part

    ops = [new_op("a", "CONV", ["input"], op_kwargs={"features": 4, "kernel_size": 3}),
           new_op("new1", "RELU", ["a"]),
           new_op("old", "CONV", ["new1"], op_kwargs={"features": 4, "kernel_size": 1}),
           new_op("new2", "ADD", ["old", "a"]),
           new_op("after", "RELU", ["new2"])]
    graph = new_graph(["input"], ["after"], ops)
    part, boundary = _fitted_part(graph, {"new1", "new2"})
    assert [op.name for op in part.ops] == ["new1", "old", "new2", "after"]
    assert boundary == ["a:0"] and part.input_names == ["a:0"]


def test_the_worker_fits_a_fresh_child_first_and_not_a_resumed_one(tmp_path, search_config):
    """Fitting is the first stage of a child's training, in the worker that trains it; a
    child resuming its own checkpoint (a later rung, a retried candidate) keeps its weights."""
    from nas import zoo
    from nas.graph.serialize import graph_to_json
    from nas.search.execution.worker import describe_failure, train_candidate
    from nas.train import fit
    from nas.train.data import check_num_classes  # 0 in the config: the data's

    train = search_config().train
    train.total_epochs = 0.1
    train.input.image_size = size = 32  # propose_child's CONFIG mutates at 32x32
    graph, constants, _ = zoo.build(train.model_name, check_num_classes(train), size)
    variables = parent_variables(graph, constants, image_size=size)
    child = _child_with_new_params(graph, constants, variables)
    task = fit.task(graph_to_json(graph, constants), variables, child.new,
                    replaced_tensors(child.spec), train.input,
                    FitConfig(steps=3, batches=1, batch_size=16), seed=0)
    fitted, _ = fit.fit_for_task(task, child.graph, child.constants, child.variables)
    direct, _ = fit_new_ops((graph, constants, variables),
                            (child.graph, child.constants, child.variables), child.new,
                            replaced_tensors(child.spec), task["images"], FitConfig(
                                steps=3, batches=1, batch_size=16))
    assert all(jax.tree.leaves(jax.tree.map(np.array_equal, fitted, direct)))

    workdir = str(tmp_path / "train")
    first, _ = train_candidate(Task(0, train.to_dict(), child.graph_json(), child.variables,
                                    workdir=workdir, fit=task))
    assert first["fit_seconds"] > 0 and np.isfinite(first["fit_mse_after"])
    resumed, _ = train_candidate(Task(0, train.to_dict(), child.graph_json(),
                                      child.variables, workdir=workdir, fit=task))
    assert "fit_seconds" not in resumed and resumed["accuracy"] == first["accuracy"]
    message, infeasible = describe_failure(ConstantOutputError("the new subgraph gives the "
                                                               "same output for every image"))
    assert message.startswith("ConstantOutputError: the new subgraph") and not infeasible


@pytest.mark.slow  # compiles a CifarNet's programs cold, about a minute on 2 loaded cores
@pytest.mark.parametrize("new_type", [None, "BATCH_NORM"])
def test_a_child_compiles_at_most_four_programs_and_its_repeat_none(tmp_path, search_config,
                                                                   new_type):
    """Compilations are counted cache misses of a fresh persistent cache. The parent trains
    first, as in a search (it compiles what every candidate shares); a child with new ops
    then compiles its fit's two programs and its train and eval steps, nothing per
    parameter shape; a child with a new batch norm no more (its eval step also computes the
    batch-norm statistics); the same child again compiles nothing."""
    from nas import zoo
    from nas.graph.serialize import graph_to_json
    from nas.search.execution.worker import train_candidate
    from nas.train import fit
    from nas.train.data import check_num_classes  # 0 in the config: the data's

    train = search_config().train
    train.total_epochs = 0.1
    train.compilation_cache_dir = str(tmp_path / "cache")
    size = int(train.input.image_size)
    graph, constants, _ = zoo.build(train.model_name, check_num_classes(train), size)
    variables = parent_variables(graph, constants, image_size=size)
    parent_json = graph_to_json(graph, constants)
    train_candidate(Task(0, train.to_dict(), parent_json, variables))
    child = _child_with_new_params(graph, constants, variables, new_type, image_size=size)
    task = fit.task(parent_json, variables, child.new, replaced_tensors(child.spec),
                    train.input, FitConfig(steps=3, batches=2, batch_size=8), seed=0)
    first, _ = train_candidate(Task(1, train.to_dict(), child.graph_json(), child.variables,
                                    fit=task))
    again, _ = train_candidate(Task(1, train.to_dict(), child.graph_json(), child.variables,
                                    fit=task))
    assert first["fit_steps"] > 0
    assert 1 <= first["compilations"] <= 4, first["compilations"]
    assert again["compilations"] == 0 and again["compile_cache_hits"] >= 3


def test_the_fit_evaluation_runs_a_prefix_shared_with_the_parent_once():
    """The child's frozen ops equal to the parent's read the parent's arrays, so XLA computes
    the prefix both networks share once (compare: the same child with weights of its own)."""
    from nas.train import fit

    def net(last):
        ops = [new_op("a", "CONV", ["input"], op_kwargs={"features": 4, "kernel_size": 3}),
               new_op("b", "CONV", ["a"], op_kwargs={"features": 4, "kernel_size": 3}),
               new_op(last, "CONV", ["b"], op_kwargs={"features": 4, "kernel_size": 1})]
        graph = new_graph(["input"], [last], ops)
        return graph, Model(graph, {}).init(jax.random.PRNGKey(0), np.zeros((1, 8, 8, 3)))

    def convolutions(p_vars, c_graph, c_vars):
        pairs, new = [("new:0", "old:0")], {"new"}
        c_graph = fit._with_outputs(c_graph, ["new:0"], new)
        part_graph, boundary = fit._fitted_part(c_graph, new)
        frozen = {k: v for k, v in c_vars["params"].items() if k not in new}
        run = fit._evaluation(fit._inference(p_graph, {}, ["old:0"]),
                              fit._inference(c_graph, {}, boundary), Model(part_graph, {}),
                              pairs, [], fit._equal_to_parent(p_vars, {"params": frozen}))
        xs = np.ones((2, 4, 8, 8, 3), np.float32)
        text = run.lower(p_vars, frozen, {"new": c_vars["params"]["new"]}, {},
                         xs).compile().as_text()
        return text.count("convolution(") + text.count("cudnn$conv")

    (p_graph, p_vars), (c_graph, c_vars) = net("old"), net("new")
    inherited = convolutions(p_vars, c_graph, c_vars)
    own = convolutions(p_vars, c_graph, jax.tree.map(lambda a: a + 1.0, c_vars))
    assert own - inherited == 2  # the child's own a and b
