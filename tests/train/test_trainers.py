"""One step loop, two strategies: what every candidate's result carries, early stops."""

from __future__ import annotations

import ast
import os
import time
from dataclasses import replace

import jax
import numpy as np
import pytest
from helpers import AT_32, tiny_config, tiny_graph

import nas.train
from nas.graph import Model
from nas.train import TrainOptions, memory, perf, train_and_eval
from nas.train.compilation import CompileCounter
from nas.zoo import revnet


def test_should_stop_is_asked_after_every_step_and_stops(data_dir):
    graph, constants = tiny_graph()
    asked = []

    def should_stop(step):
        asked.append(step)
        return step == 3

    metrics, epochs, state = train_and_eval(tiny_config(data_dir, total_epochs=2.0),
                                            options=TrainOptions(graph=graph, constants=constants,
                                                                 should_stop=should_stop))
    assert asked == [1, 2, 3]
    assert metrics.steps == 3 and epochs == 0
    assert 0.0 < metrics.acc <= 1.0 and np.isfinite(metrics.loss)  # evaluated normally
    assert metrics.flops > 0 and metrics.num_params > 0


@pytest.mark.slow  # per-layer compilation of the reversible trainer: about 30 s here
def test_reversible_result_is_measured_like_any_candidate(data_dir, tmp_path):
    graph, constants, _ = revnet.RevNet(depth=2, width=8, num_classes=10)
    config = tiny_config(data_dir, trainer="reversible", total_epochs=0.1,
                         **{"input.image_size": 16})
    metrics, _, state = train_and_eval(config,
                                       options=TrainOptions(graph=graph, constants=constants,
                                                            workdir=str(tmp_path)))
    model = Model(graph, constants)
    apply = lambda v, x: model.apply(v, x, deterministic=True, training=False)  # noqa: E731
    assert metrics.flops == perf.flops_per_example(apply, {"params": state["params"]},
                                                   (16, 16, 3)) > 0
    assert metrics.num_params == perf.count_params(state["params"]) > 0
    assert metrics.im_sec_core_train > 0 and metrics.im_sec_core_infer > 0
    assert metrics.steps == max(1, int(1437 / 64 * 0.1))


def _train_imports() -> dict[str, set[str]]:
    """module -> the nas.train modules it imports (anywhere in the file), from the source."""
    root = os.path.dirname(nas.train.__file__)
    graph: dict[str, set[str]] = {}
    for name in os.listdir(root):
        if not name.endswith(".py") or name == "__init__.py":
            continue
        tree = ast.parse(open(os.path.join(root, name)).read())
        deps = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "nas.train":
                deps |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("nas.train."):
                deps.add(node.module.split(".")[2])
            elif isinstance(node, ast.Import):
                deps |= {a.name.split(".")[2] for a in node.names
                         if a.name.startswith("nas.train.")}
        graph[name[:-3]] = deps
    return graph


def test_one_loop_and_no_import_cycle():
    graph = _train_imports()
    assert not hasattr(memory, "train_and_eval")  # the second loop is gone
    assert "revrun" not in graph  # nor its duplicate memory estimate
    state: dict[str, int] = {}

    def visit(m: str, path: list[str]) -> None:
        if state.get(m) == 1:
            raise AssertionError(f"import cycle: {' -> '.join([*path, m])}")
        if state.get(m) == 2 or m not in graph:
            return
        state[m] = 1
        for d in graph[m]:
            visit(d, [*path, m])
        state[m] = 2

    for module in graph:
        visit(module, [])
    assert "train" not in graph["memory"] | graph["trainers"]


def test_bad_compute_dtype_is_value_error(data_dir):
    graph, constants = tiny_graph()
    with pytest.raises(ValueError, match="compute_dtype"):
        train_and_eval(tiny_config(data_dir, compute_dtype="float16"),
                       options=TrainOptions(graph=graph, constants=constants))


def test_compilations_are_counted_and_the_cache_serves_a_run_of_another_length(data_dir,
                                                                               tmp_path):
    graph, constants = tiny_graph()
    config = tiny_config(data_dir, total_epochs=0.2,
                         compilation_cache_dir=str(tmp_path / "cache"))
    options = TrainOptions(graph=graph, constants=constants)
    first, _, _ = train_and_eval(config, options=options)
    # twice as long: the schedule's step counts are data, so the same programs serve it
    config.total_epochs = 0.4
    second, _, _ = train_and_eval(config, options=options)
    assert second.steps > first.steps
    assert first.compilations >= 2  # at least the train and eval steps
    assert second.compile_cache_hits >= 2  # both loaded, not compiled again
    assert second.compilations == 0
    assert any((tmp_path / "cache").iterdir())


def _scaled(variables):
    """A refit that changes values only: every parameter halved, statistics kept."""
    return {"params": {op: {k: np.asarray(v) * 0.5 for k, v in p.items()}
                       for op, p in variables["params"].items()},
            "batch_stats": variables.get("batch_stats", {})}


def test_refit_while_compiling_trains_like_starting_from_its_result(data_dir, tmp_path):
    graph, constants = tiny_graph(with_bn=True)
    config = tiny_config(data_dir, total_epochs=0.1, ema_decay=0.9,
                         **AT_32)
    model = Model(graph, constants)
    start = {k: dict(v) for k, v in model.init(
        {"params": np.asarray([0, 7], np.uint32), "dropout": np.asarray([0, 7], np.uint32)},
        np.zeros((1, 32, 32, 3), np.float32)).items()}
    seen = []

    def refit(variables, built):
        seen.append(variables)
        return _scaled(variables)

    options = TrainOptions(graph=graph, constants=constants)
    refitted, _, a = train_and_eval(
        config, options=replace(options, init_variables=start, refit=refit))
    plain, _, b = train_and_eval(config, options=replace(options, init_variables=_scaled(start)))
    assert len(seen) == 1  # given the trainer's starting variables: the inherited ones
    np.testing.assert_array_equal(seen[0]["params"]["conv"]["kernel"],
                                  start["params"]["conv"]["kernel"])
    for op in b["params"]:  # the EMA and optimizer state started from the refitted values
        for k in b["params"][op]:
            np.testing.assert_allclose(a["params"][op][k], b["params"][op][k], rtol=1e-6)
    assert refitted.acc == plain.acc
    assert refitted.compile_seconds > 0
    assert 0 <= refitted.refit_overlap_seconds <= refitted.compile_seconds


def _until(done, seconds: float = 300.0) -> None:
    deadline = time.monotonic() + seconds  # a safety net: the loop ends on a count
    while not done() and time.monotonic() < deadline:
        time.sleep(0.01)


def test_the_steps_compile_once_the_refit_has_built_its_programs(data_dir):
    """Tracing holds Python's lock: on the CPU the steps wait for the refit's `built()`
    (its own programs traced), then compile while it runs them; on an accelerator they
    compile at once."""
    graph, constants = tiny_graph()
    config = tiny_config(data_dir, total_epochs=0.1)
    on_cpu = jax.default_backend() == "cpu"
    counts = {}

    def refit(variables, built):
        with CompileCounter() as before:
            if on_cpu:
                time.sleep(0.5)  # steps compiling now would ask for their programs
            else:
                _until(lambda: before.requests)
        counts["before"] = before.requests
        with CompileCounter() as after:
            built()
            _until(lambda: after.requests or not on_cpu)
        counts["after"] = after.requests
        return variables

    metrics, _, _ = train_and_eval(config, options=TrainOptions(graph=graph, constants=constants,
                                                                refit=refit))
    if on_cpu:
        assert counts["before"] == 0 and counts["after"] > 0
    else:
        assert counts["before"] > 0
    assert metrics.compile_seconds > 0


def test_refit_is_skipped_when_resuming_and_bad_refits_are_value_errors(data_dir, tmp_path):
    graph, constants = tiny_graph()
    config = tiny_config(data_dir, total_epochs=0.2, ckpt_steps=2)
    calls = []

    def refit(variables, built):
        calls.append(1)
        return variables

    options = TrainOptions(graph=graph, constants=constants)
    resumed = replace(options, workdir=str(tmp_path), refit=refit)
    train_and_eval(config, options=replace(resumed, stop_epochs=0.1))
    train_and_eval(config, options=resumed)  # resumes from the checkpoint of the first call
    assert calls == [1]

    def reshaped(variables, built):
        out = _scaled(variables)
        out["params"]["logits"]["bias"] = np.zeros(3, np.float32)
        return out

    with pytest.raises(ValueError, match="names, shapes and dtypes"):
        train_and_eval(config, options=replace(options, refit=reshaped))

    def failing(variables, built):
        raise ValueError("fit: no usable pair")

    with pytest.raises(ValueError, match="no usable pair"):  # the compile thread is joined
        train_and_eval(config, options=replace(options, refit=failing))
