"""The parts of the Ray executor that need no cluster: folders as values, the dataset as a
shipment cached per node, the `search.ray` settings, and addresses checked up front."""

import os
import socket

import numpy as np
import pytest

from nas.search.execution import ray_parts
from nas.search.execution.ray_parts import (
    Files,
    keep_returned,
    latest_step,
    read_files,
    replace_folder,
    unpack_once,
)
from nas.search.strategy.settings import RayConfig, validate_search


def _tree(root):
    os.makedirs(os.path.join(root, "train", "a"))
    with open(os.path.join(root, "train", "a", "0.png"), "wb") as f:
        f.write(b"png bytes")
    with open(os.path.join(root, "notes.txt"), "w") as f:
        f.write("hello")
    os.utime(os.path.join(root, "notes.txt"), ns=(1_000_000_123, 1_000_000_123))
    return root


def test_a_folder_travels_with_its_bytes_and_times(tmp_path):
    files = read_files(_tree(str(tmp_path / "src")), prefix="data")
    assert [rel for rel, _, _ in files.entries] == ["data/notes.txt", "data/train/a/0.png"]
    out = unpack_once(files, str(tmp_path / "cache" / "x"))
    assert open(os.path.join(out, "data", "train", "a", "0.png"), "rb").read() == b"png bytes"
    assert os.stat(os.path.join(out, "data", "notes.txt")).st_mtime_ns == 1_000_000_123
    assert read_files(out).digest() == files.digest() != Files().digest()
    assert files.size == len(b"png bytes") + len(b"hello")


def test_a_shipped_path_may_not_leave_its_folder(tmp_path):
    bad = Files((("../escape", b"x", 0),))
    with pytest.raises(ValueError, match="inside its folder"):
        unpack_once(bad, str(tmp_path / "cache" / "x"))
    assert not os.path.exists(tmp_path / "cache" / "escape")
    assert not os.path.exists(tmp_path / "cache" / "x")


def test_replace_folder_leaves_exactly_the_new_files(tmp_path):
    target = str(tmp_path / "candidates" / "3" / "train")
    replace_folder(Files((("old.txt", b"1", 0),)), target)
    replace_folder(Files((("metrics.jsonl", b"{}", 0),)), target)
    assert sorted(os.listdir(target)) == ["metrics.jsonl"]
    assert sorted(os.listdir(os.path.dirname(target))) == ["train"]


def test_a_task_returns_its_checkpoint_only_for_a_later_rung(tmp_path):
    run = tmp_path / "train"
    for step in ("4", "12", "12.orbax-checkpoint-tmp-1"):
        (run / "checkpoints" / step).mkdir(parents=True)
    assert latest_step(str(run)) == "12"
    assert latest_step(str(tmp_path / "none")) is None
    assert keep_returned("metrics.jsonl", None) and keep_returned("metrics.jsonl", "12")
    assert not keep_returned("checkpoints/12/state/x", None)
    assert keep_returned("checkpoints/12/state/x", "12")
    assert not keep_returned("checkpoints/4/state/x", "12")


def _npz(path):
    rng = np.random.default_rng(0)
    arrays = {f"{k}_{s}": (rng.integers(0, 256, (6, 8, 8), dtype=np.uint8) if k == "x" else
                           np.repeat(np.arange(3, dtype=np.uint8), 2))
              for s in ("train", "test") for k in ("x", "y")}
    np.savez(path, **arrays)
    return path


def _train_config(name, data_dir=""):
    return {"input": {"data": {"name": name, "split": "train"}, "data_dir": data_dir}}


def test_an_npz_dataset_is_fetched_once_per_node_and_read_from_its_cache(tmp_path):
    (tmp_path / "driver").mkdir()
    path = _npz(str(tmp_path / "driver" / "d.npz"))
    kind, name, files = ray_parts.dataset_files(_train_config(f"npz:{path}", "/driver/tfds"))
    assert (kind, name) == ("npz", "d.npz")
    store = {"ref-1": files}  # the object store, as far as this node's cache can tell
    fetched = []

    def fetch(ref):
        fetched.append(ref)
        return store[ref]

    shipped = ray_parts.shipment(kind, name, files.digest(), "ref-1")
    cache = str(tmp_path / "node-cache")
    given = _train_config(f"npz:{path}", "/driver/tfds")
    first = ray_parts.node_train_config(given, shipped, fetch, cache)
    again = ray_parts.node_train_config(given, shipped, fetch, cache)
    assert fetched == ["ref-1"] and first == again
    assert given["input"]["data"]["name"] == f"npz:{path}"  # the caller's dict is unchanged
    local = first["input"]["data"]["name"].removeprefix("npz:")
    assert local.startswith(cache) and open(local, "rb").read() == open(path, "rb").read()
    assert first["input"]["data_dir"].startswith(cache)
    from nas.train import data as data_lib

    source = data_lib.open_source(first["input"]["data"]["name"], "train",
                                  first["input"]["data_dir"])
    assert len(source) == 6


def test_digits_travels_as_its_name_and_a_missing_file_is_one_line(tmp_path):
    kind, _, files = ray_parts.dataset_files(_train_config("digits", "/driver/only"))
    assert (kind, files) == ("digits", None)
    config = ray_parts.node_train_config(_train_config("digits", "/driver/only"),
                                        ray_parts.shipment(kind, "digits", "", None),
                                        lambda ref: pytest.fail("digits is never fetched"))
    assert config["input"]["data_dir"] == ""
    missing = str(tmp_path / "gone.npz")
    with pytest.raises(ValueError, match=r"^config field 'train.input.data.name': .*gone.npz: "
                                         r"no such file") as e:
        ray_parts.dataset_files(_train_config(f"npz:{missing}"))
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="not prepared in .* search.ray.dataset='node'"):
        ray_parts.dataset_files(_train_config("cifar10", str(tmp_path)))


def test_ray_settings_fall_back_on_the_per_candidate_fields():
    assert RayConfig.from_dict({}).resolved(2.0, 0.5) == RayConfig(2.0, 0.5, {}, "ship")
    config = RayConfig.from_dict({"num_gpus": 1, "resources": {"TPU": 4}, "dataset": "node"}
                                 ).resolved(1.0, 0.0)
    assert config.request() == {"CPU": 1.0, "GPU": 1.0, "TPU": 4.0}


@pytest.mark.parametrize("section, expected", [
    ({"num_gpus": -1}, "'search.ray.num_gpus' must be a number >= 0"),
    ({"dataset": "nfs"}, "'search.ray.dataset' must be one of 'ship', 'node'"),
    ({"resources": {"TPU": 0}}, "'search.ray.resources.TPU' must be a number > 0"),
    ({"resources": {"GPU": 1}}, "'search.ray.resources.GPU': set search.ray.num_gpus"),
    ({"gpus": 1}, "'search.ray.gpus' is unknown"),
])
def test_bad_ray_settings_are_one_line(search_config, section, expected):
    config = search_config(executor="ray")
    config.search.ray = section
    with pytest.raises(ValueError, match=expected) as e:
        validate_search(config)
    assert "\n" not in str(e.value)


def _closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_address_is_one_line():
    address = f"127.0.0.1:{_closed_port()}"
    with pytest.raises(ValueError, match=r"^config field 'search.ray_address': cannot reach "
                                         r"a Ray cluster at [\d.]+:\d+ \(") as e:
        ray_parts.check_reachable(address)
    assert "\n" not in str(e.value)
