"""The memory property of the reversible trainer.

On CPU host and device memory are the same RAM, so we check what does carry over to an
accelerator: compiled temporaries of a step do not grow with depth, and the parameter and
optimizer bytes held in the `device` memory kind stay within about two layers' worth.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

from nas.graph.block import Block
from nas.graph.ops import OpType, new_graph, new_op
from nas.graph.reversible import Coupling, RevBlock, ReversibleSpec
from nas.train import config as config_lib
from nas.train.memory import standard_step_memory
from nas.train.reversible import ReversibleTrainer
from nas.train.revprograms import ProgramCache
from nas.zoo import revnet

IMAGE = (16, 16, 3)
BATCH = 8


def _config(optax_name: str = "scale_by_adam") -> config_lib.ml_collections.ConfigDict:
    return config_lib.with_defaults({"optax_name": optax_name, "lr": 0.01})


def _batch(shape, batch=BATCH) -> dict[str, np.ndarray]:
    rs = np.random.RandomState(0)
    return {"image": rs.randn(batch, *shape).astype(np.float32),
            "label": rs.randint(0, 10, batch).astype(np.int32)}


def _reversible_temp(depth: int) -> int:
    graph, constants, _ = revnet.RevNet(depth=depth, width=8, num_stages=1)
    trainer = ReversibleTrainer(graph, constants, config=_config(), image_shape=IMAGE,
                                sched_kw={"total_steps": 2})
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


def _device_bytes() -> int:
    return sum(x.nbytes for x in jax.live_arrays()
               if x.sharding.memory_kind in ("device", None) and not x.is_deleted())


@pytest.mark.parametrize("optax_name", ["identity", "scale_by_adam"])
def test_device_resident_weights_stay_within_two_layers(optax_name):
    spec = _dense_spec(depth=12, width=256)
    trainer = ReversibleTrainer(spec, config=_config(optax_name), image_shape=(32,),
                                sched_kw={"total_steps": 2})
    batch = _batch((32,), batch=4)
    trainer.train_step(batch, jax.random.PRNGKey(0))  # compile outside the measurement
    baseline = _device_bytes()
    seen: list[int] = []
    trainer.hook = lambda event, layer: seen.append(_device_bytes() - baseline)
    trainer.train_step(batch, jax.random.PRNGKey(0))
    per_layer = max(trainer.layer_bytes())
    activations = 8 * 4 * 256 * 4  # a few (4, 256) float32 stacks and cotangents
    assert len(seen) == 2 * len(trainer.layers) - 1
    assert max(seen) <= 2 * per_layer + activations, (max(seen), per_layer)
    total = sum(trainer.layer_bytes())
    assert total > 5 * (2 * per_layer)  # the model as a whole would not fit that bound
    kinds = {x.sharding.memory_kind for x in jax.tree.leaves(trainer.host)}
    assert kinds == {"pinned_host"}


def test_transfers_and_launches_per_step_are_linear_in_depth_with_small_slopes():
    """A count, not a timing: one packed buffer per layer is copied onto the device once per
    pass and written back once; one program launch per layer and pass."""
    cache = ProgramCache()
    counts = {}
    for depth in (2, 6):
        graph, constants, _ = revnet.RevNet(depth=depth, width=8, num_stages=1)
        trainer = ReversibleTrainer(graph, constants, config=_config(), image_shape=IMAGE,
                                    sched_kw={"total_steps": 2}, cache=cache)
        trainer.train_step(_batch(IMAGE), jax.random.PRNGKey(0))
        counts[depth] = trainer.step_counts()
        layers = len(trainer.layers)
        assert counts[depth]["to_device"] <= 2 * layers + 4, counts
        assert counts[depth]["to_host"] <= layers + 4, counts
        assert counts[depth]["launches"] <= 2 * layers + 4, counts
    per_coupling = {k: (counts[6][k] - counts[2][k]) / 4 for k in counts[2]}
    assert per_coupling == {"to_device": 2.0, "to_host": 1.0, "launches": 2.0}, counts
