"""Mutation limits are counts: the same seed gives the same child however slow the clock;
the wall-clock limit is only a safety net whose expiry is reported as such."""

import time

import pytest

from nas.graph.serialize import graph_to_json
from nas.mutation import NoChildFound, propose_child
from nas.synthesis.base import Budget, SynthesisTimeout
from nas.zoo import cnn

CONFIG = {"linear_p": None}  # default safety net (600 s), 60 s real under a 10x clock


def _slow_clock(factor):
    """A clock that runs `factor` times faster than real time (a machine that slow)."""
    start = time.monotonic()
    return lambda: start + factor * (time.monotonic() - start)


def _fingerprints(clock, seeds):
    graph, constants, _ = cnn.CifarNet()
    out = []
    for seed in seeds:
        try:
            child = propose_child(graph, constants, None, seed=seed, config=CONFIG, clock=clock)
            out.append(graph_to_json(child.graph, child.constants))
        except NoChildFound as e:
            assert "safety net" not in str(e)
            out.append(f"none: {str(e).split(';', 1)[0]}")
    return out


def test_same_children_with_the_clock_slowed_10x():
    seeds = [0, 5, 6]
    assert _fingerprints(time.monotonic, seeds) == _fingerprints(_slow_clock(10.0), seeds)


def test_budget_counts_steps_and_flags_the_safety_net():
    budget = Budget(max_steps=3)
    for _ in range(3):
        budget.spend()
    with pytest.raises(SynthesisTimeout, match="budget of 3 steps"):
        budget.spend()
    assert not budget.safety_net_expired
    ticks = iter(range(100))
    net = Budget(max_steps=None, seconds=5, clock=lambda: float(next(ticks)) * 10)
    with pytest.raises(SynthesisTimeout, match="safety net"):
        net.spend()
    assert net.safety_net_expired


def test_safety_net_expiry_is_recorded_in_the_reason():
    graph, constants, _ = cnn.CifarNet()
    with pytest.raises(NoChildFound, match="safety net expired"):
        propose_child(graph, constants, None, seed=0, config=CONFIG, clock=_slow_clock(1e6))
