"""Choosing a trainer from the device-memory budget, before any training step."""

from __future__ import annotations

import pytest
from helpers import tiny_config, tiny_graph

from nas.train.memory import DeviceBudgetExceeded, select_trainer, standard_step_memory
from nas.zoo import revnet

SMALL = {"input.image_size": 16, "input.batch_size": 8, "num_classes": 10}


def test_auto_sends_reversible_graphs_over_the_budget_to_the_reversible_trainer():
    graph, constants, _ = revnet.RevNet(depth=2, width=8)
    over = tiny_config("", trainer="auto", device_memory_budget=1, **SMALL)
    assert select_trainer(over, graph, constants) == "reversible"
    under = tiny_config("", trainer="auto", device_memory_budget=2**40, **SMALL)
    assert select_trainer(under, graph, constants) == "standard"
    fixed = tiny_config("", trainer="standard", device_memory_budget=1, **SMALL)
    assert select_trainer(fixed, graph, constants) == "standard"
    forced = tiny_config("", trainer="reversible", **SMALL)
    assert select_trainer(forced, graph, constants) == "reversible"


def test_plain_graph_over_the_budget_is_infeasible_with_estimate_and_budget():
    graph, constants = tiny_graph()
    config = tiny_config("", trainer="auto", device_memory_budget=1000, **SMALL)
    need = standard_step_memory(graph, constants, config, 8, (16, 16, 3))["total"]
    with pytest.raises(DeviceBudgetExceeded) as info:
        select_trainer(config, graph, constants)
    err = info.value
    assert isinstance(err, ValueError)
    assert (err.need, err.budget) == (need, 1000)
    assert f"({need} bytes)" in str(err) and "(1000 bytes)" in str(err)
    assert "not reversible" in str(err)
    config.device_memory_budget = 2**40
    assert select_trainer(config, graph, constants) == "standard"


def test_estimate_uses_the_configured_number_of_classes():
    graph, constants, _ = revnet.RevNet(num_classes=100, depth=1, width=8)
    config = tiny_config("", **{**SMALL, "num_classes": 100})
    assert standard_step_memory(graph, constants, config, 8, (16, 16, 3))["total"] > 0


def test_estimate_handles_batchnorm_graphs():
    graph, constants = tiny_graph(with_bn=True)
    config = tiny_config("", **SMALL)
    assert standard_step_memory(graph, constants, config, 8, (16, 16, 3))["total"] > 0
