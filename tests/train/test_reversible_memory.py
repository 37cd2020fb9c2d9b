"""The memory property of the reversible trainer.

On CPU host and device memory are the same RAM, so we check what does carry over to an
accelerator: the compiled step's temporaries (its device working set: the state is an
argument in host memory) do not grow with depth and hold about one layer's weights and
optimizer state at a time; and the step launches the same few programs at every depth.
These tests run the rolled scans accelerators run (`unroll=False`); the CPU default
unrolls them (see `revprograms.default_unroll`), and XLA:CPU then schedules the copies of
all layers early, so there the temporaries do grow with depth (on the CPU that memory is
the host's anyway).
"""

from __future__ import annotations

import re

import jax
import numpy as np
import pytest

from nas.graph.block import Block
from nas.graph.ops import OpType, new_graph, new_op
from nas.graph.reversible import Coupling, RevBlock, ReversibleSpec
from nas.train import config as config_lib
from nas.train.launches import count_launches
from nas.train.memory import standard_step_memory
from nas.train.reversible import ReversibleTrainer
from nas.zoo import revnet

IMAGE = (16, 16, 3)
BATCH = 8


def _config(optax_name: str = "scale_by_adam") -> config_lib.ml_collections.ConfigDict:
    return config_lib.with_defaults({"optax_name": optax_name, "lr": 0.01, "num_classes": 10})


def _batch(shape, batch=BATCH) -> dict[str, np.ndarray]:
    rs = np.random.RandomState(0)
    return {"image": rs.randn(batch, *shape).astype(np.float32),
            "label": rs.randint(0, 10, batch).astype(np.int32)}


def _reversible_temp(depth: int) -> int:
    graph, constants, _ = revnet.RevNet(depth=depth, width=8, num_stages=1)
    trainer = ReversibleTrainer(graph, constants, config=_config(), image_shape=IMAGE,
                                sched_kw={"total_steps": 2}, unroll=False)
    trainer.train_step(_batch(IMAGE), jax.random.PRNGKey(0))
    return trainer.max_temp_bytes()


def _standard_temp(depth: int) -> int:
    graph, constants, _ = revnet.RevNet(depth=depth, width=8, num_stages=1)
    return standard_step_memory(graph, constants, _config(), BATCH, IMAGE)["temp"]


@pytest.mark.parametrize("depths", [(2, 8), pytest.param((2, 8, 32), marks=pytest.mark.slow)])
def test_temp_bytes_do_not_grow_with_depth(depths):
    rev = {d: _reversible_temp(d) for d in depths}
    std = {d: _standard_temp(d) for d in (depths[0], depths[-1])}
    first, deepest = depths[0], depths[-1]
    activation = BATCH * IMAGE[0] * IMAGE[1] * 8 * 4  # one width-8 f32 activation
    # Differences, not ratios: on a GPU a fixed convolution workspace dominates both
    # trainers' temps at this size. The standard step keeps every layer's activations...
    assert std[deepest] - std[first] >= (deepest - first) * activation, std
    # ...the reversible step's temps are one layer's, whatever the depth.
    assert all(rev[d] <= 1.1 * rev[first] for d in depths), rev
    assert rev[deepest] - rev[first] < activation, rev


def _dense_spec(depth: int, width: int) -> ReversibleSpec:
    """Wide dense couplings: parameters dominate activations by far."""
    def dense(name: str) -> Block:
        return Block(name, new_graph(["input"], ["dense"], [
            new_op("dense", OpType.DENSE, ["input"], op_kwargs={"features": "S:-1"})]))

    stem = Block("stem", new_graph(["input"], ["a", "b"], [
        new_op("a", OpType.DENSE, ["input"], op_kwargs={"features": width}),
        new_op("b", OpType.DENSE, ["input"], op_kwargs={"features": width})]))
    head = Block("head", new_graph(["x1", "x2"], ["logits"], [
        new_op("sum", OpType.ADD, ["x1", "x2"]),
        new_op("logits", OpType.DENSE, ["sum"], op_kwargs={"features": 10})]))
    couplings = [Coupling(dense("f"), dense("g")) for _ in range(depth)]
    return ReversibleSpec([RevBlock(stem, couplings)], head)


@pytest.mark.parametrize("optax_name", ["identity", "scale_by_adam"])
def test_step_works_on_about_one_layer_of_weights_at_a_time(optax_name):
    """The step's working memory (XLA temporaries: what is not an argument or an output,
    i.e. every device copy of a layer's weights) stays within three layers' packed state
    (a layer's row as fetched, unpacked, and updated) although the whole model is many
    times that; the state itself stays in host memory."""
    spec = _dense_spec(depth=24, width=256)
    trainer = ReversibleTrainer(spec, config=_config(optax_name), image_shape=(32,),
                                sched_kw={"total_steps": 2}, unroll=False)
    before = trainer.full_params
    trainer.train_step(_batch((32,), batch=4), jax.random.PRNGKey(0))
    per_layer = max(trainer.layer_bytes())
    activations = 8 * 4 * 256 * 4  # a few (4, 256) float32 stacks and cotangents
    assert trainer.max_temp_bytes() <= 3 * per_layer + activations, (
        trainer.max_temp_bytes(), per_layer)
    total = sum(trainer.layer_bytes())
    assert total > 5 * (3 * per_layer)  # the model as a whole would not fit that bound
    kinds = {x.sharding.memory_kind for x in jax.tree.leaves(trainer.host)}
    assert kinds == {"pinned_host"}
    assert max(float(np.max(np.abs(before[k][n] - v)))
               for k, p in trainer.full_params.items() for n, v in p.items()) > 0


@pytest.mark.slow
def test_launches_per_step_do_not_depend_on_depth():
    """Counted where JAX hands executables to the runtime (`count_launches`), not reported
    by the trainer: one training step launches the same few programs at every depth."""
    launches = {}
    for depth in (2, 8, 24):
        graph, constants, _ = revnet.RevNet(depth=depth, width=8, num_stages=1)
        batch, rng = _batch(IMAGE), jax.random.PRNGKey(0)
        with count_launches() as count:  # the trainer's programs are first called inside
            # Rolled scans (as on accelerators): compiling does not grow with depth, and
            # the launches are the same unrolled.
            trainer = ReversibleTrainer(graph, constants, config=_config(), unroll=False,
                                        image_shape=IMAGE, sched_kw={"total_steps": 4})
            trainer.train_step(batch, rng)  # compiles
            count.reset()
            trainer.train_step(batch, rng)
            launches[depth] = count.launches
        assert len(trainer.segments) == 3  # stem, one run of couplings, head
        counts = trainer.step_counts()
        assert counts["to_device"] == 2 * depth + 3 and counts["to_host"] == depth + 2
    assert launches[2] == launches[8] == launches[24] <= 3, launches
    assert launches[2] >= 1  # the counter does see the step


def test_cpu_step_is_straight_line_with_canonical_convolutions():
    """On the CPU the default step has no loop and every convolution is in the canonical
    NHWC x HWIO -> NHWC form. A depth-2 RevNet has runs of one coupling: as a one-trip
    `lax.scan` (even unrolled) XLA:CPU left their convolutions non-canonical, a step 5x
    slower than the standard one (see `revprograms._scan`)."""
    graph, constants, _ = revnet.RevNet(depth=2, width=8)
    trainer = ReversibleTrainer(graph, constants, config=_config(), image_shape=IMAGE,
                                sched_kw={"total_steps": 2}, devices=jax.devices("cpu")[:1])
    trainer.train_step(_batch(IMAGE), jax.random.PRNGKey(0))
    assert {len(seg.layers) for seg in trainer.segments} == {1}
    (step,) = trainer.cache.programs()
    text = step.as_text()
    assert " while(" not in text
    layouts = re.findall(r"dim_labels=([^,}\s]+)", text)
    assert layouts and set(layouts) == {"b01f_01io->b01f"}, sorted(set(layouts))
