"""Function-preserving children compute exactly what their parent computed at init."""

import jax.numpy as jnp
import numpy as np

from nas.graph import Model
from nas.mutation import propose_child
from nas.zoo import cnn, resnetv1
from tests.mutation.helpers import check_child, parent_variables

CONFIG = {"linear_p": None, "function_preserving": True}


def _check_preserving(graph, constants, seeds):
    variables = parent_variables(graph, constants)
    x = jnp.asarray(np.random.default_rng(0).normal(size=(2, 32, 32, 3)), jnp.float32)
    parent_logits = Model(graph, constants).apply(variables, x)
    preserving = 0
    for seed in seeds:
        child = propose_child(graph, constants, variables, seed=seed, config=CONFIG)
        check_child(child, graph, constants, variables, forward=False)
        if not child.function_preserving:
            continue
        preserving += 1
        assert any(name.endswith("/bn") and "residual" in name for name in child.new)
        child_logits = Model(child.graph, child.constants).apply(child.variables, x)
        np.testing.assert_array_equal(np.asarray(child_logits), np.asarray(parent_logits))
    return preserving


def test_cifarnet_children_start_from_the_parent_function():
    graph, constants, _ = cnn.CifarNet()
    assert _check_preserving(graph, constants, range(4)) >= 3


def test_resnet18_children_start_from_the_parent_function():
    graph, constants, _ = resnetv1.ResNet18(num_classes=10, input_resolution="small")
    assert _check_preserving(graph, constants, range(2)) >= 1
