"""The on-disk store of per-op shapes and pairings: read back instead of recomputed, never
stale across code versions, and never able to change a result (a bad file is skipped)."""

import logging
import subprocess
import sys
from pathlib import Path

import pytest

from nas.graph import OpType, new_graph, new_op
from nas.properties import linear, op_cache, tensor_shapes

OPS = [
    new_op("conv", OpType.CONV, ["input"], op_kwargs={"features": 5, "kernel_size": [3, 3]}),
    new_op("pool", OpType.MAX_POOL, ["conv"], input_kwargs={"window_shape": [2, 2]}),
    new_op("output", OpType.DENSE, ["pool"], op_kwargs={"features": 3}),
]
GRAPH = new_graph(["input"], ["output"], OPS)
SHAPE = (2, 8, 8, 3)


def infer() -> tuple[dict, list]:
    """Every tensor's shape and every op's pairing, with the in-memory caches emptied first
    so that only the store (or a fresh computation) can answer."""
    tensor_shapes.clear_caches()
    linear.clear_cache()
    shapes = tensor_shapes.graph_shapes(GRAPH, {}, {"input": SHAPE})
    tensors = {name: (tuple(s.shape), str(s.dtype)) for name, s in shapes.tensors.items()}
    pairings = []
    for op in OPS:
        ins = [shapes.shape(n) for n in op.input_names]
        op_kw, in_kw = tensor_shapes.resolve_kwargs(op, ins, shapes.tensors, {})
        found = linear.op_pairings(op.type, op_kw, in_kw, ins)
        pairings.append([[p.mappings.tolist() for p in per_out] for per_out in found])
    return tensors, pairings


def forbid_computing(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*args, **kwargs):
        raise AssertionError("computed although the store holds it")

    monkeypatch.setattr(tensor_shapes, "eval_op_shapes", fail)
    monkeypatch.setattr(linear, "_jacobian_op_pairings", fail)


@pytest.fixture
def store(tmp_path):
    previous = op_cache.enabled_path()
    path = op_cache.enable(str(tmp_path / "cache" / "ops.sqlite"))
    yield path
    op_cache.enable(previous or "none")
    tensor_shapes.clear_caches()
    linear.clear_cache()


def test_results_are_read_back_instead_of_recomputed(store, monkeypatch):
    computed = infer()
    forbid_computing(monkeypatch)
    assert infer() == computed


def test_another_process_reads_what_this_one_stored(store):
    computed = infer()
    script = ("import sys; sys.path.insert(0, sys.argv[2]); import test_op_cache as t; "
              "from nas.properties import op_cache; op_cache.enable(sys.argv[1]); "
              "import pytest; mp = pytest.MonkeyPatch(); t.forbid_computing(mp); "
              "print(repr(t.infer()))")
    here = str(Path(__file__).parent)
    out = subprocess.run([sys.executable, "-c", script, store, here], capture_output=True,
                         text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == repr(computed)


def test_other_code_versions_do_not_read_the_entries(store, monkeypatch):
    computed = infer()
    monkeypatch.setattr(op_cache, "_VERSION", ["another version of nas"])
    calls = []
    original = tensor_shapes.eval_op_shapes
    monkeypatch.setattr(tensor_shapes, "eval_op_shapes",
                        lambda *a, **k: calls.append(a) or original(*a, **k))
    assert infer() == computed
    assert len(calls) == len(OPS)


def test_off_by_default_and_with_none(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("NAS_PROPERTY_CACHE", raising=False)
    previous = op_cache.enabled_path()
    try:
        assert op_cache.enable("none") is None
        infer()
        assert not list(tmp_path.rglob("*.sqlite"))
        assert op_cache.enable("") == str(tmp_path / ".cache" / "nas" / "op_properties.sqlite")
    finally:
        op_cache.enable(previous or "none")


def test_an_unreadable_store_is_skipped_with_one_warning(tmp_path, caplog):
    bad = tmp_path / "ops.sqlite"
    bad.write_bytes(b"this is not a database" * 100)
    previous = op_cache.enabled_path()
    op_cache.enable(str(bad))
    try:
        with caplog.at_level(logging.WARNING):
            tensors, pairings = infer()
        assert op_cache.enabled_path() is None  # switched off after the first failure
        assert [r for r in caplog.records if "op property cache" in r.getMessage()
                and str(bad) in r.getMessage()]
        assert len([r for r in caplog.records if "op property cache" in r.getMessage()]) == 1
        op_cache.enable("none")
        assert (tensors, pairings) == infer()  # the same results as without a store
        assert bad.read_bytes() == b"this is not a database" * 100  # untouched
    finally:
        op_cache.enable(previous or "none")


def misfit_graph(name: str):
    """A conv of 4 groups on 3 channels: jax cannot trace it."""
    return new_graph(["input"], [name], [new_op(name, OpType.CONV, ["input"], op_kwargs={
        "features": 8, "kernel_size": [3, 3], "feature_group_count": 4})])


def misfit_error(name: str) -> str:
    with pytest.raises(ValueError) as error:
        tensor_shapes.graph_shapes(misfit_graph(name), {}, {"input": SHAPE})
    return str(error.value)


@pytest.mark.parametrize("in_memory", [True, False])
def test_an_op_that_does_not_fit_is_traced_once_and_each_graph_is_told_its_own_op(
        store, monkeypatch, in_memory):
    tensor_shapes.clear_caches()
    first = misfit_error("a")
    assert first.startswith("malformed graph: op 'a' (CONV) failed shape inference on "
                            "inputs [(2, 8, 8, 3)]: "), first
    forbid_computing(monkeypatch)
    if not in_memory:
        tensor_shapes.clear_caches()  # only the store can answer
    assert misfit_error("b") == first.replace("op 'a'", "op 'b'", 1)
