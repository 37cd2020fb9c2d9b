import os
import shutil

import numpy as np
import optax
import pytest

from nas.train.checkpoint import Checkpointer, load_variables, save_variables


def _state():
    p = {"conv": {"kernel": np.arange(6, dtype=np.float32).reshape(2, 3)}}
    tx = optax.adam(1e-3)
    return {"params": p, "opt_state": tx.init(p), "step": np.int32(7)}


def test_round_trip_keeps_structure_and_meta(tmp_path):
    ck = Checkpointer(str(tmp_path), keep=2, async_save=False)
    st = _state()
    ck.save(7, st, {"data": {"next_index": 7}, "train_rates": [1.5]})
    ck.wait()
    restored, meta = Checkpointer(str(tmp_path)).restore(_state())
    assert type(restored["opt_state"][0]) is type(st["opt_state"][0])
    np.testing.assert_array_equal(restored["params"]["conv"]["kernel"],
                                  st["params"]["conv"]["kernel"])
    assert int(restored["step"]) == 7 and meta["data"] == {"next_index": 7}


def test_keeps_latest_and_missing_raises(tmp_path):
    with pytest.raises(ValueError, match="no checkpoint"):
        Checkpointer(str(tmp_path)).restore(_state())
    ck = Checkpointer(str(tmp_path), keep=1, async_save=False)
    for step in (1, 2, 3):
        ck.save(step, _state(), {"data": {}})
    ck.wait()
    assert ck.latest_step() == 3
    assert sorted(os.listdir(ck.directory)) == ["3"]


def test_corrupt_checkpoint_raises_value_error(tmp_path):
    ck = Checkpointer(str(tmp_path), async_save=False)
    ck.save(1, _state(), {"data": {}})
    ck.wait()
    state_dir = os.path.join(ck.directory, "1", "state")
    for root, _, files in os.walk(state_dir):
        for name in files:
            path = os.path.join(root, name)
            with open(path, "r+b") as f:  # scramble every byte of every file
                data = f.read()
                f.seek(0)
                f.write(bytes(b ^ 0x5A for b in data))
    with pytest.raises(ValueError, match="corrupt"):
        Checkpointer(str(tmp_path)).restore(_state())


def test_shape_mismatch_raises_value_error(tmp_path):
    ck = Checkpointer(str(tmp_path), async_save=False)
    ck.save(1, _state(), {"data": {}})
    ck.wait()
    other = _state()
    other["params"]["conv"]["kernel"] = np.zeros((3, 3), np.float32)
    other["opt_state"] = optax.adam(1e-3).init(other["params"])
    with pytest.raises(ValueError):
        Checkpointer(str(tmp_path)).restore(other)


def test_shared_variables_are_read_once_and_cannot_be_edited(tmp_path):
    variables = {"params": {"d": {"kernel": np.arange(6, dtype=np.float32).reshape(2, 3)}}}
    path = save_variables(str(tmp_path / "v"), variables)
    first, again = load_variables(path, shared=True), load_variables(path, shared=True)
    assert first["params"]["d"]["kernel"] is again["params"]["d"]["kernel"]  # not read again
    with pytest.raises(ValueError, match="read-only"):
        first["params"]["d"]["kernel"][0, 0] = -1.0
    first["params"]["other"] = {}  # the dicts are the caller's own
    assert "other" not in load_variables(path, shared=True)["params"]
    own = load_variables(path)  # not shared: writable, read from disk
    own["params"]["d"]["kernel"][0, 0] = -1.0
    np.testing.assert_array_equal(load_variables(path, shared=True)["params"]["d"]["kernel"],
                                  variables["params"]["d"]["kernel"])


def test_shared_variables_changed_on_disk_are_read_again(tmp_path):
    path = save_variables(str(tmp_path / "v"), {"params": {"d": {"k": np.ones((2, 3))}}})
    load_variables(path, shared=True)  # now kept by this process
    replacement = save_variables(str(tmp_path / "w"), {"params": {"d": {"k": np.zeros((2, 3))}}})
    shutil.rmtree(path)
    shutil.copytree(replacement, path)  # another process replaced it
    np.testing.assert_array_equal(load_variables(path, shared=True)["params"]["d"]["k"],
                                  np.zeros((2, 3)))
    for root, _, files in os.walk(path):
        for name in files:  # scrambled in place: same names, sizes and inodes
            with open(os.path.join(root, name), "r+b") as f:
                data = f.read()
                f.seek(0)
                f.write(bytes(b ^ 0x5A for b in data))
    with pytest.raises(ValueError, match="cannot be read"):
        load_variables(path, shared=True)
