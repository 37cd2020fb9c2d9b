"""The exported-candidate file (`nas.io`): round trip, atomic writes, the version 1 format,
and one-line errors for files that are missing, damaged, foreign, newer, unsafe or whose
weights do not fit the graph."""

import io
import json
import os
import zipfile

import numpy as np
import pytest

import nas
from nas.graph.serialize import graph_to_dict
from nas.io import write_candidate
from nas.train.checkpoint import save_variables
from nas.zoo import cnn
from tests.mutation.helpers import parent_variables

SETTINGS = {"lr": 5e-4, "total_epochs": 1.0}


@pytest.fixture(scope="module")
def cifarnet():
    graph, constants, _ = cnn.CifarNet()
    return graph, constants, parent_variables(graph, constants)


def _write(path, cifarnet, variables=None, **kw):
    graph, constants, fresh = cifarnet
    return write_candidate(
        path,
        graph_to_dict(graph, constants),
        fresh if variables is None else variables,
        input_shape=(32, 32, 3),
        train_config=SETTINGS,
        metrics={"accuracy": 0.9},
        info={"id": 7},
        **kw,
    )


def _rewrite(src, dst, change):
    """Copy archive `src` to `dst`, passing every member through `change(name, data)`
    (returning None drops the member)."""
    with zipfile.ZipFile(src) as a, zipfile.ZipFile(dst, "w") as b:
        for name in a.namelist():
            data = change(name, a.read(name))
            if data is not None:
                b.writestr(name, data)
    return dst


def _edit_doc(src, dst, edit):
    def change(name, data):
        if name != "candidate.json":
            return data
        doc = json.loads(data)
        edit(doc)
        return json.dumps(doc)

    return _rewrite(src, dst, change)


def _one_line(excinfo, *needles):
    text = str(excinfo.value)
    assert "\n" not in text, text
    for needle in needles:
        assert needle in text, (needle, text)


def test_round_trip_and_call(tmp_path, cifarnet):
    graph, constants, variables = cifarnet
    variables = {**variables, "batch_stats": {}}  # empty collections survive too
    path = _write(tmp_path / "c.zip", cifarnet, variables)
    assert os.listdir(tmp_path) == ["c.zip"]  # the temp file was renamed
    cand = nas.load_candidate(path)
    assert (cand.graph, cand.constants) == (graph, constants)
    assert cand.input_shape == (32, 32, 3) and cand.train_config == SETTINGS
    assert cand.metrics == {"accuracy": 0.9} and cand.info == {"id": 7}
    assert cand.variables["batch_stats"] == {}
    for op, params in variables["params"].items():
        for name, value in params.items():
            got = cand.variables["params"][op][name]
            assert got.dtype == value.dtype and np.array_equal(got, value)
    batch = np.random.default_rng(0).normal(size=(2, 32, 32, 3)).astype(np.float32)
    np.testing.assert_array_equal(cand(batch), cand.model.apply(variables, batch))


def test_a_failed_write_keeps_the_old_file(tmp_path, cifarnet):
    path = _write(tmp_path / "c.zip", cifarnet)
    before = path.read_bytes()
    bad = {"params": {"op": {"kernel": np.array([object()], dtype=object)}}}
    with pytest.raises(ValueError, match="op/kernel has dtype object"):
        _write(path, cifarnet, bad)
    assert path.read_bytes() == before and os.listdir(tmp_path) == ["c.zip"]


def test_version_1_files_are_still_read(tmp_path, cifarnet):
    graph, constants, variables = cifarnet
    checkpoint = save_variables(str(tmp_path / "ck"), variables)
    old = tmp_path / "old.json"
    old.write_text(
        json.dumps(
            {
                "format": "nas-candidate",
                "version": 1,
                "id": 3,
                "graph": graph_to_dict(graph, constants),
                "metrics": {"accuracy": 0.5},
                "checkpoint_path": checkpoint,
            }
        )
    )
    cand = nas.load_candidate(old)
    assert cand.version == 1 and cand.info["id"] == 3 and cand.metrics == {"accuracy": 0.5}
    assert cand.train_config is None and cand.input_shape is None
    kernel = variables["params"]["fc/logits"]["kernel"]
    np.testing.assert_array_equal(cand.variables["params"]["fc/logits"]["kernel"], kernel)


def _npy(array, allow_pickle=False):
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, array, allow_pickle=allow_pickle)
    return buffer.getvalue()


def _member_of(doc, op="fc/logits", name="kernel"):
    return next(e for e in doc["weights"] if e.get("path") == ["params", op, name])


BAD_FILES = {
    "missing": (lambda src, dst: dst.parent / "nothing.zip", ["nothing.zip", "no such file"]),
    "a directory": (lambda src, dst: dst.parent, ["a directory"]),
    "not json nor zip": (
        lambda src, dst: (dst.write_bytes(b"\x00garbage"), dst)[1],
        ["expected a zip archive"],
    ),
    "truncated zip": (
        lambda src, dst: (dst.write_bytes(src.read_bytes()[:-100]), dst)[1],
        ["not a candidate archive", "truncated or damaged zip"],
    ),
    "damaged member": (lambda src, dst: _flip_byte(src, dst), ["damaged zip archive"]),
    "foreign zip": (
        lambda src, dst: _rewrite(src, dst, lambda n, d: None if n == "candidate.json" else d),
        ["without candidate.json"],
    ),
    "newer version": (
        lambda src, dst: _edit_doc(src, dst, lambda d: d.update(version=3)),
        ["version 3 is not supported", "expected version 2"],
    ),
    "other format": (
        lambda src, dst: _edit_doc(src, dst, lambda d: d.update(format="x")),
        ["expected format 'nas-candidate'"],
    ),
    "bad graph": (
        lambda src, dst: _edit_doc(src, dst, lambda d: d["graph"].update(ops=3)),
        ["field 'graph'", "'ops' must be a list"],
    ),
    "member missing": (
        lambda src, dst: _rewrite(src, dst, lambda n, d: None if n == "weights/0.npy" else d),
        ["'weights/0.npy' is missing"],
    ),
    "pickled member": (
        lambda src, dst: _rewrite(
            src,
            dst,
            lambda n, d: (
                _npy(np.array([{"x": 1}], dtype=object), allow_pickle=True)
                if n == "weights/0.npy"
                else d
            ),
        ),
        ["weights/0.npy"],
    ),
    "object dtype in the manifest": (
        lambda src, dst: _edit_doc(src, dst, lambda d: d["weights"][0].update(dtype="|O")),
        ["'dtype' must be a numeric dtype"],
    ),
    "header disagrees": (
        lambda src, dst: _edit_doc(src, dst, lambda d: _member_of(d).update(shape=[10, 256])),
        ["manifest says float32[10, 256]"],
    ),
    "manifest entry without a path": (
        lambda src, dst: _edit_doc(src, dst, lambda d: d["weights"][0].update(path="k")),
        ["weights entry #0", "'path' must be a non-empty list of strings"],
    ),
    "input the graph cannot take": (
        lambda src, dst: _edit_doc(src, dst, lambda d: d.update(input_shape=[1, 1, 3])),
        ["the graph does not run on its input_shape [1, 1, 3]", "fc/dense"],
    ),
    "weights shaped for another graph": (
        lambda src, dst: _swap_kernel(src, dst, (128, 10)),
        ["fc/logits/kernel are float32[128, 10]", "graph expects float32[256, 10]"],
    ),
    "weights lack an array": (
        lambda src, dst: _edit_doc(
            src,
            dst,
            lambda d: d.update(
                weights=[
                    e for e in d["weights"] if e.get("path") != ["params", "fc/logits", "bias"]
                ]
            ),
        ),
        ["weights lack params/fc/logits/bias", "float32[10]"],
    ),
}


def _flip_byte(src, dst):
    """One weight byte changed on disk: the zip's CRC no longer matches."""
    data = bytearray(src.read_bytes())
    data[len(data) // 2] ^= 0xFF
    dst.write_bytes(bytes(data))
    return dst


def _swap_kernel(src, dst, shape):
    """A kernel of another shape, consistently described (only the graph disagrees)."""
    with zipfile.ZipFile(src) as a:
        member = _member_of(json.loads(a.read("candidate.json")))["member"]

    def change(name, data):
        if name == member:
            return _npy(np.zeros(shape, np.float32))
        if name == "candidate.json":
            doc = json.loads(data)
            _member_of(doc)["shape"] = list(shape)
            return json.dumps(doc)
        return data

    return _rewrite(src, dst, change)


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_bad_files_are_one_line_naming_the_file(tmp_path, cifarnet, case):
    (tmp_path / "made").mkdir()
    src = _write(tmp_path / "made" / "good.zip", cifarnet)
    make, needles = BAD_FILES[case]
    dst = tmp_path / "made" / "bad.zip"
    path = make(src, dst)
    with pytest.raises(ValueError) as excinfo:
        nas.load_candidate(path)
    _one_line(excinfo, str(path), *needles)


def test_the_loader_is_the_package_api():
    import nas.io

    assert nas.load_candidate is nas.io.load_candidate
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        nas.nope  # noqa: B018
