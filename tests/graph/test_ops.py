import pytest

from nas.graph import Graph, OpType, canonical_name, new_graph, new_op, validate


def test_new_op_canonicalizes_inputs_and_copies_kwargs():
    kwargs = {"features": 8, "kernel_size": [3, 3]}
    op = new_op("conv", OpType.CONV, ["input"], op_kwargs=kwargs)
    kwargs["kernel_size"].append(5)
    assert op.input_names == ["input:0"]
    assert op.op_kwargs == {"features": 8, "kernel_size": [3, 3]}
    assert op.output_names == ["conv:0"]


def test_op_type_by_name():
    assert new_op("r", "relu", ["x"]).type is OpType.RELU


@pytest.mark.parametrize("bad", ["a:b", "a*b", "a%b", ""])
def test_new_op_rejects_reserved_names(bad):
    with pytest.raises(ValueError, match="op name"):
        new_op(bad, OpType.RELU, ["input"])


def test_new_op_rejects_unknown_type():
    with pytest.raises(ValueError, match="unknown op type 'CONV3D'"):
        new_op("c", "CONV3D", ["input"])


def test_canonical_name():
    assert canonical_name("a/b") == "a/b:0"
    assert canonical_name("a/b:2") == "a/b:2"


def _graph(*ops, outputs=("out",)):
    return new_graph(["input"], list(outputs), list(ops))


def test_new_graph_rejects_missing_output():
    with pytest.raises(ValueError, match="graph output 'nope'"):
        _graph(new_op("out", OpType.RELU, ["input"]), outputs=["nope"])


def test_new_graph_rejects_duplicate_names():
    with pytest.raises(ValueError, match="'out' is not unique"):
        _graph(new_op("out", OpType.RELU, ["input"]), new_op("out", OpType.GELU, ["input"]))


def test_new_graph_rejects_dangling_input():
    with pytest.raises(ValueError, match="op 'out': input 'ghost:0'"):
        _graph(new_op("out", OpType.RELU, ["ghost"]))


def test_new_graph_rejects_wrong_arity():
    with pytest.raises(ValueError, match="op 'out': ADD takes 2 input"):
        _graph(new_op("out", OpType.ADD, ["input"]))


def test_new_graph_rejects_unknown_kwarg():
    with pytest.raises(ValueError, match="op 'out': unknown op_kwargs \\['featurez'\\]"):
        _graph(new_op("out", OpType.DENSE, ["input"], op_kwargs={"features": 3, "featurez": 3}))


def test_new_graph_rejects_missing_required_kwarg():
    with pytest.raises(ValueError, match="op 'out': CONV requires kwarg 'kernel_size'"):
        _graph(new_op("out", OpType.CONV, ["input"], op_kwargs={"features": 3}))


@pytest.mark.parametrize("value", ["S:-1*2*2", "S:-1%0", "S:x", "Q:3", "S:-1*a", "I:nosuchinit",
                                   "features", "K:"])
def test_new_graph_rejects_unparseable_symbolic(value):
    with pytest.raises(ValueError, match="op 'out' kwarg 'features'"):
        _graph(new_op("out", OpType.DENSE, ["input"], op_kwargs={"features": value}))


def test_symbolic_reference_to_later_tensor_is_rejected():
    with pytest.raises(ValueError, match="refers to tensor 'later:0'"):
        _graph(new_op("out", OpType.DENSE, ["input"], op_kwargs={"features": "S:later:-1"}),
               new_op("later", OpType.RELU, ["out"]))


def test_validate_rejects_non_graph_and_corrupted_fields():
    with pytest.raises(ValueError, match="expected a Graph"):
        validate("graph")
    graph = _graph(new_op("out", OpType.RELU, ["input"]))
    graph.ops[0].type = "RELU"
    with pytest.raises(ValueError, match="op 'out': unknown op type"):
        validate(graph)


def test_graphs_compare_by_value_and_are_unhashable():
    a = _graph(new_op("out", OpType.RELU, ["input"]))
    b = _graph(new_op("out", OpType.RELU, ["input"]))
    assert a == b and isinstance(a, Graph)
    with pytest.raises(TypeError):
        hash(a)
