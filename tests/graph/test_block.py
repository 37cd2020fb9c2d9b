import pytest

from nas.graph import OpType, new_graph, new_op
from nas.graph.block import Block


def make_block():
    ops = [
        new_op("dense", OpType.DENSE, ["input"], op_kwargs={"features": "K:width%2"}),
        new_op("proj", OpType.DENSE, ["dense"], op_kwargs={"features": "S:input:-1*2"}),
        new_op("add", OpType.ADD, ["proj", "proj"]),
    ]
    return Block("blk", new_graph(["input"], ["add"], ops), {"width": 8})


def test_instantiate_prefixes_and_retargets():
    block = make_block().instantiate(["stem"], instance_id=3)
    names = [op.name for op in block.graph.ops]
    assert names == ["blk3/dense", "blk3/proj", "blk3/add"]
    assert block.graph.ops[0].input_names == ["stem:0"]
    assert block.graph.ops[0].op_kwargs["features"] == "K:blk3/width%2"
    assert block.graph.ops[1].op_kwargs["features"] == "S:stem:0:-1*2"
    assert block.graph.output_names == ["blk3/add:0"]
    assert block.constants == {"blk3/width": 8}
    assert block.name == "blk"


def test_reinstantiating_a_derived_block_uses_the_base_definition():
    derived = make_block().instantiate(["a"], instance_id=0, constants={"width": 4})
    again = derived.instantiate(["b"], instance_id=1)
    assert again.constants == {"blk1/width": 4}
    assert again.graph.ops[0].input_names == ["b:0"]


def test_wrong_number_of_inputs():
    with pytest.raises(ValueError, match="wrong number of inputs"):
        make_block().instantiate(["a", "b"])
