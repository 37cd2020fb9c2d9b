import json

import pytest

from nas.graph.serialize import constants_from_json, graph_from_json, graph_to_json, load
from nas.zoo import cnn, efficientnet, resnetv1, vit


@pytest.mark.parametrize("build", [
    cnn.CifarNet,
    lambda: resnetv1.ResNet18(num_classes=10),
    lambda: efficientnet.EfficientNetB0(num_classes=10),
    lambda: vit.ViT_Ti16(num_classes=10, image_size=32),
])
def test_round_trip_is_lossless(build):
    graph, constants, _ = build()
    text = graph_to_json(graph, constants)
    assert graph_from_json(text) == graph
    assert constants_from_json(text) == constants
    assert graph_to_json(*load(text)) == text


def test_tuples_survive():
    graph, constants, _ = resnetv1.ResNet18(num_classes=10)
    assert graph_from_json(graph_to_json(graph)).op("fc/mean").input_kwargs["axis"] == (1, 2)


@pytest.mark.parametrize("mutate,message", [
    (lambda d: d.update(format="pickle"), "not a serialized graph"),
    (lambda d: d.update(version=99), "version 99 is not supported"),
    (lambda d: d["ops"][0].update(type="WARP"), "unknown op type 'WARP'"),
    (lambda d: d["ops"][1].update(input_names=["ghost"]), "input 'ghost:0'"),
    (lambda d: d["ops"][0].pop("name"), "missing field 'name'"),
    (lambda d: d.update(ops="nope"), "field 'ops' must be a list"),
])
def test_bad_documents_are_value_errors(mutate, message):
    graph, constants, _ = cnn.CifarNet()
    data = json.loads(graph_to_json(graph, constants))
    mutate(data)
    with pytest.raises(ValueError, match=message):
        load(json.dumps(data))


def test_not_json():
    with pytest.raises(ValueError, match="not valid JSON"):
        load("{")


def test_callables_are_refused():
    graph, constants, _ = cnn.CifarNet()
    graph.ops[0].op_kwargs["kernel_init"] = print
    with pytest.raises(ValueError, match="op 'proj' op_kwargs.*not serializable"):
        graph_to_json(graph, constants)


def test_deep_or_huge_json_is_refused_clearly(monkeypatch):
    import pytest

    from nas.graph import serialize

    with pytest.raises(ValueError, match="nested deeper"):
        serialize.load("[" * 200_000 + "]" * 200_000)
    deep = {"format": "nas.graph", "version": 1, "input_names": ["input"], "output_names": [],
            "constants": {}, "ops": []}
    node = deep["constants"]
    for _ in range(serialize.MAX_DEPTH + 1):
        node["x"] = {}
        node = node["x"]
    with pytest.raises(ValueError, match="nested deeper"):
        serialize.graph_from_dict(deep)
    monkeypatch.setattr(serialize, "MAX_BYTES", 100)
    with pytest.raises(ValueError, match="more than the 100"):
        serialize.load(" " * 101)
    with pytest.raises(ValueError, match="expected format 'nas.graph', got 'nas-candidate'"):
        serialize.graph_from_dict({"format": "nas-candidate"})


def test_bare_input_names_load_as_canonical_names():
    graph, constants, _ = cnn.CifarNet()
    data = json.loads(graph_to_json(graph, constants))
    for op in data["ops"]:
        op["input_names"] = [name.split(":")[0] for name in op["input_names"]]
    loaded, _ = load(json.dumps(data))
    assert loaded == graph


@pytest.mark.parametrize("value", [5, "ab"])
def test_tuple_tag_must_hold_a_list(value):
    graph, constants, _ = cnn.CifarNet()
    data = json.loads(graph_to_json(graph, constants))
    data["ops"][0]["op_kwargs"]["kernel_size"] = {"__tuple__": value}
    with pytest.raises(ValueError, match="'__tuple__' must hold a list"):
        load(json.dumps(data))


def test_bool_num_outputs_is_refused():
    graph, constants, _ = cnn.CifarNet()
    data = json.loads(graph_to_json(graph, constants))
    data["ops"][0]["num_outputs"] = True
    with pytest.raises(ValueError, match="op 'proj': num_outputs"):
        load(json.dumps(data))
