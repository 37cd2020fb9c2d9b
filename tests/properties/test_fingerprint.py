import json
import os
import subprocess
import sys

import jax.numpy as jnp
import pytest

from nas.graph import OpType, new_graph, new_op
from nas.graph.serialize import graph_to_json, load
from nas.properties.fingerprint import fingerprint_graph

INPUT = {"input": (5, 5, 5)}

SCRIPT = """
import json, sys
from nas.graph.serialize import load
from nas.properties.fingerprint import fingerprint_graph
graph, constants = load(sys.stdin.read())
print(json.dumps(fingerprint_graph(graph, constants, {"input": (5, 32, 32, 3)})))
"""


def two_branches(names=("dense", "conv", "out"), reverse=False, use_bias=True):
    ops = [new_op(names[0], OpType.DENSE, ["input"],
                  op_kwargs={"features": 32, "use_bias": use_bias}),
           new_op(names[1], OpType.CONV, ["input"],
                  op_kwargs={"features": 32, "kernel_size": [3], "kernel_init": "I:zeros"})]
    if reverse:
        ops.reverse()
    ops.append(new_op(names[2], OpType.ADD, [names[0], names[1]]))
    return new_graph(["input"], [names[2]], ops)


def test_same_graph_same_fingerprint_and_names_and_order_do_not_matter():
    assert fingerprint_graph(two_branches(), {}, INPUT) == fingerprint_graph(
        two_branches(), {}, INPUT)
    renamed = two_branches(("d", "c", "out"), reverse=True)
    assert fingerprint_graph(renamed, {}, INPUT) == fingerprint_graph(two_branches(), {}, INPUT)


def test_types_kwargs_wiring_and_output_names_matter():
    base = fingerprint_graph(two_branches(), {}, INPUT)
    assert fingerprint_graph(two_branches(use_bias=False), {}, INPUT) != base
    assert fingerprint_graph(two_branches(("dense", "conv", "sum")), {}, INPUT) != base
    dense_dense = new_graph(["input"], ["out"], [
        new_op("a", OpType.DENSE, ["input"], op_kwargs={"features": 32}),
        new_op("b", OpType.DENSE, ["input"], op_kwargs={"features": 32}),
        new_op("out", OpType.ADD, ["a", "b"])])
    assert fingerprint_graph(dense_dense, {}, INPUT) != base
    rewired = new_graph(["input"], ["out"], [
        new_op("a", OpType.DENSE, ["input"], op_kwargs={"features": 32}),
        new_op("b", OpType.DENSE, ["a"], op_kwargs={"features": 32}),
        new_op("out", OpType.ADD, ["a", "b"])])
    assert fingerprint_graph(rewired, {}, INPUT) != fingerprint_graph(dense_dense, {}, INPUT)


def test_symbolic_and_explicit_widths_and_defaults_agree(cifarnet):
    graph, constants = cifarnet
    explicit = graph_to_json(graph, constants)
    data = json.loads(explicit)
    for op in data["ops"]:
        if op["op_kwargs"].get("features") == "S:-1*2":
            op["op_kwargs"]["features"] = 64 if op["name"].startswith("conv_layer0") else 128
            op["op_kwargs"]["use_bias"] = True  # flax's default, written out
    graph2, constants2 = load(json.dumps(data))
    x = {"input": jnp.ones((5, 32, 32, 3))}
    assert fingerprint_graph(graph2, constants2, x) == fingerprint_graph(graph, constants, x)
    # Without inputs kwargs are hashed as written: the two spellings differ.
    assert fingerprint_graph(graph2, constants2) != fingerprint_graph(graph, constants)


def run_in_fresh_process(text: str, hash_seed: int) -> str:
    """Fingerprint in a new interpreter with its own string-hash salt."""
    env = {**os.environ, "PYTHONHASHSEED": str(hash_seed), "JAX_PLATFORMS": "cpu"}
    done = subprocess.run([sys.executable, "-c", SCRIPT], input=text, capture_output=True,
                          text=True, timeout=300, check=True, env=env)
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_fingerprint_is_stable_across_processes(cifarnet):
    graph, constants = cifarnet
    text = graph_to_json(graph, constants)
    changed = graph_to_json(graph, {**constants, "out_features": 128})
    first, second, other = (run_in_fresh_process(t, seed)
                            for seed, t in enumerate((text, text, changed), start=1))
    assert first == second == fingerprint_graph(graph, constants, {"input": (5, 32, 32, 3)})
    assert other != first


def test_malformed_graph_raises_value_error(cifarnet):
    graph, constants = cifarnet
    broken = new_graph(graph.input_names, graph.output_names, graph.ops)
    broken.ops[3].input_names = ["ghost:0"]
    with pytest.raises(ValueError, match="ghost"):
        fingerprint_graph(broken, constants, {"input": (5, 32, 32, 3)})
