"""Users' own data (`folder:DIR`, `npz:FILE`): read, checked, converted once to array_record,
then trained through the same path as every dataset."""

from __future__ import annotations

import os
import runpy
import subprocess
import sys

import ml_collections
import numpy as np
import pytest
from helpers import AT_32, tiny_config, tiny_graph
from PIL import Image
from userdata_helpers import digits_arrays, small_arrays, write_folder, write_npz

from nas.train import TrainOptions, data, devdata, train_and_eval, userdata

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _config(tmp_path, name: str, **overrides) -> ml_collections.ConfigDict:
    c = tiny_config(str(tmp_path / "tfds"), **overrides)
    c.input.data.name = name
    c.num_classes = 3
    c.input.batch_size = 4
    return c


def _leftovers(data_dir) -> list[str]:
    """What a conversion left in the data dir besides finished datasets and lock files."""
    root = os.path.join(data_dir, userdata.SUBDIR)
    if not os.path.isdir(root):
        return []
    return sorted(e for e in os.listdir(root) if not e.endswith(".lock")
                  and not (e.startswith(("folder-", "npz-")) and
                           os.path.isfile(os.path.join(root, e, "dataset_info.json"))))


# ----------------------------------------------------------------------------- reading


def test_folder_reads_sorted_classes_through_tfds(tmp_path):
    root = write_folder(str(tmp_path / "imgs"), small_arrays(per_class=2, classes=3))
    os.rename(os.path.join(root, "train", "digit0"), os.path.join(root, "train", "zebra"))
    os.rename(os.path.join(root, "test", "digit0"), os.path.join(root, "test", "zebra"))
    data_dir = str(tmp_path / "tfds")
    train = data.open_source(f"folder:{root}", "train", data_dir)
    test = data.open_source(f"folder:{root}", "test", data_dir)
    assert (len(train), len(test)) == (6, 6)
    names = train.dataset_info.features["label"].names
    assert names == ["digit1", "digit2", "zebra"]  # sorted folder names
    ex = train[0]
    assert ex["image"].shape == (6, 6, 1) and ex["image"].dtype == np.uint8
    by_label = {}
    for i in range(len(train)):
        by_label.setdefault(names[int(train[i]["label"])], 0)
        by_label[names[int(train[i]["label"])]] += 1
    assert by_label == {"digit1": 2, "digit2": 2, "zebra": 2}


def test_npz_keras_layouts_nhw_and_nhwc(tmp_path):
    grey = write_npz(str(tmp_path / "grey.npz"), small_arrays())
    colour = small_arrays(channels=3)
    colour["y_train"] = colour["y_train"].reshape(-1, 1)  # as Keras' cifar10 has them
    colour = write_npz(str(tmp_path / "colour.npz"), colour)
    data_dir = str(tmp_path / "tfds")
    g = data.open_source(f"npz:{grey}", "train", data_dir)
    c = data.open_source(f"npz:{colour}", "train", data_dir)
    assert g[0]["image"].shape == (6, 6, 1) and c[0]["image"].shape == (6, 6, 3)
    assert g.dataset_info.features["label"].num_classes == 3
    arrays = small_arrays(channels=3)
    got = sorted((int(c[i]["label"]), c[i]["image"].tobytes()) for i in range(len(c)))
    want = sorted((int(y), x.tobytes()) for x, y in zip(arrays["x_train"], arrays["y_train"],
                                                      strict=True))
    assert got == want  # every image and label, unchanged
    pp = data.make_preprocess(f"npz:{grey}", True, 32)
    out = pp(g[0], np.random.default_rng(0))
    assert out["image"].shape == (32, 32, 3) and out["image"].dtype == np.float32
    assert -1.0 <= out["image"].min() and out["image"].max() <= 1.0
    batch = next(iter(data.make_train_dataset(g, pp, local_batch_size=4, seed=0)))  # grain
    assert batch["image"].shape == (4, 32, 32, 3) and batch["label"].shape == (4,)


def test_folder_with_several_sizes_and_colour_becomes_rgb(tmp_path):
    root = write_folder(str(tmp_path / "imgs"), small_arrays(per_class=1, classes=2))
    Image.new("RGB", (9, 5), (255, 0, 0)).save(os.path.join(root, "train", "digit1", "c.jpg"))
    name, data_dir = f"folder:{root}", str(tmp_path / "tfds")
    train = data.open_source(name, "train", data_dir)
    shapes = sorted(train[i]["image"].shape for i in range(len(train)))
    assert shapes == [(5, 9, 3), (6, 6, 3), (6, 6, 3)]
    pp = data.make_preprocess(name, False, 16)
    assert {pp(train[i], None)["image"].shape for i in range(3)} == {(16, 16, 3)}


# ----------------------------------------------------------------------------- conversion


def test_converted_once_then_reused_until_a_file_changes(tmp_path, capsys):
    root = write_folder(str(tmp_path / "imgs"), small_arrays())
    name, data_dir = f"folder:{root}", str(tmp_path / "tfds")
    first = userdata.converted_dir(name, data_dir)
    assert capsys.readouterr().out.startswith("converting ")
    info = os.stat(os.path.join(first, "dataset_info.json"))
    assert userdata.converted_dir(name, data_dir) == first
    assert capsys.readouterr().out == ""
    assert os.stat(os.path.join(first, "dataset_info.json")).st_ino == info.st_ino
    image = os.path.join(root, "test", "digit2", "0.png")
    Image.new("L", (6, 6), 7).save(image)
    os.utime(image, ns=(info.st_mtime_ns + 10**9, info.st_mtime_ns + 10**9))
    second = userdata.converted_dir(name, data_dir)
    assert second != first and capsys.readouterr().out.startswith("converting ")
    assert _leftovers(data_dir) == []


def test_two_processes_converting_at_once_leave_one_copy(tmp_path):
    path = write_npz(str(tmp_path / "d.npz"), small_arrays(per_class=50))
    data_dir = str(tmp_path / "tfds")
    code = ("import sys; from nas.train import userdata; "
            "print(userdata.converted_dir(sys.argv[1], sys.argv[2]))")
    env = dict(os.environ, PYTHONPATH=REPO, JAX_PLATFORMS="cpu")
    procs = [subprocess.Popen([sys.executable, "-c", code, f"npz:{path}", data_dir],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=env) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1][-800:] for o in outs]
    dirs = {o[0].strip().splitlines()[-1] for o in outs}
    assert len(dirs) == 1
    # one converted; the other waited for it, then reused its folder
    assert sum(o[0].startswith("converting ") for o in outs) == 1
    assert _leftovers(data_dir) == []
    assert len(data.open_source(f"npz:{path}", "train", data_dir)) == 150


def test_a_failed_conversion_leaves_nothing_behind(tmp_path):
    root = write_folder(str(tmp_path / "imgs"), small_arrays())
    bad = os.path.join(root, "train", "digit1", "9.png")
    noise = np.random.default_rng(0).integers(0, 256, (64, 64), dtype=np.uint8)
    Image.fromarray(noise).save(bad)
    with open(bad, "r+b") as f:  # a good header, the pixel data cut short
        f.truncate(os.path.getsize(bad) // 2)
    data_dir = str(tmp_path / "tfds")
    with pytest.raises(ValueError) as e:
        userdata.converted_dir(f"folder:{root}", data_dir)
    assert str(e.value).startswith(f"{bad}: unreadable image") and "\n" not in str(e.value)
    assert _leftovers(data_dir) == []
    assert not [d for d in os.listdir(os.path.join(data_dir, userdata.SUBDIR))
                if not d.endswith(".lock")]


# ----------------------------------------------------------------------------- bad input


def _folder_case(root: str, case: str) -> str:
    """Break the folder dataset at `root` as `case` says; return the path the error names."""
    import shutil

    if case == "missing train":
        shutil.rmtree(os.path.join(root, "train"))
        return os.path.join(root, "train")
    if case == "missing test":
        shutil.rmtree(os.path.join(root, "test"))
        return os.path.join(root, "test")
    if case == "classes differ":
        os.rename(os.path.join(root, "test", "digit2"), os.path.join(root, "test", "two"))
        return root
    if case == "empty class":
        folder = os.path.join(root, "test", "digit1")
        for f in os.listdir(folder):
            os.unlink(os.path.join(folder, f))
        return folder
    if case == "unreadable image":
        bad = os.path.join(root, "train", "digit0", "1.png")
        with open(bad, "wb") as f:
            f.write(b"not a png at all")
        return bad
    if case == "not an image":
        bad = os.path.join(root, "train", "digit0", "notes.txt")
        with open(bad, "w") as f:
            f.write("hello")
        return bad
    if case == "16-bit image":
        bad = os.path.join(root, "test", "digit0", "0.png")
        Image.fromarray(np.full((6, 6), 40000, np.uint16)).save(bad)
        return bad
    if case == "no such folder":
        shutil.rmtree(root)
        return root
    raise AssertionError(case)


@pytest.mark.parametrize("case", ["missing train", "missing test", "classes differ",
                                  "empty class", "unreadable image", "not an image",
                                  "16-bit image", "no such folder"])
def test_bad_folder_is_one_line_naming_the_file(tmp_path, case):
    root = write_folder(str(tmp_path / "imgs"), small_arrays())
    named = _folder_case(root, case)
    data_dir = str(tmp_path / "tfds")
    with pytest.raises(ValueError) as e:
        data.check_dataset(_config(tmp_path, f"folder:{root}"))
    message = str(e.value)
    assert message.startswith(f"{named}:") and "\n" not in message, message
    assert _leftovers(data_dir) == []


def _npz_case(arrays: dict[str, np.ndarray], case: str) -> tuple[dict, str]:
    if case == "missing array":
        del arrays["y_test"]
        return arrays, "missing array 'y_test'"
    if case == "lengths differ":
        arrays["y_train"] = arrays["y_train"][:-1]
        return arrays, "x_train holds 9 images but y_train 8 labels"
    if case == "not uint8":
        arrays["x_test"] = arrays["x_test"].astype(np.float32) / 255
        return arrays, "x_test has dtype float32, expected uint8"
    if case == "two channels":
        arrays["x_train"] = np.stack([arrays["x_train"]] * 2, axis=-1)
        return arrays, "x_train has shape (9, 6, 6, 2)"
    if case == "shapes differ":
        arrays["x_test"] = arrays["x_test"][:, :5]
        return arrays, "x_test images are 5x6x1, x_train's 6x6x1"
    if case == "negative label":
        arrays["y_test"] = arrays["y_test"].astype(np.int64) - 1
        return arrays, "y_test has label -1"
    if case == "float labels":
        arrays["y_train"] = arrays["y_train"].astype(np.float32)
        return arrays, "y_train has dtype float32"
    if case == "labels outside num_classes":
        arrays["y_train"][0] = 3
        return arrays, "labels up to 3, outside config field 'num_classes' = 3"
    raise AssertionError(case)


@pytest.mark.parametrize("case", ["missing array", "lengths differ", "not uint8",
                                  "two channels", "shapes differ", "negative label",
                                  "float labels", "labels outside num_classes"])
def test_bad_npz_is_one_line_naming_the_file(tmp_path, case):
    arrays, expected = _npz_case(small_arrays(), case)
    path = write_npz(str(tmp_path / "d.npz"), arrays)
    with pytest.raises(ValueError) as e:
        data.check_dataset(_config(tmp_path, f"npz:{path}"))
    message = str(e.value)
    assert message.startswith(f"{path}: ") and expected in message and "\n" not in message
    assert _leftovers(str(tmp_path / "tfds")) == []


@pytest.mark.parametrize("content", [b"garbage", None])
def test_unreadable_or_missing_npz_is_one_line(tmp_path, content):
    path = str(tmp_path / "d.npz")
    if content is not None:
        with open(path, "wb") as f:
            f.write(content)
    with pytest.raises(ValueError) as e:
        data.check_dataset(_config(tmp_path, f"npz:{path}"))
    assert str(e.value).startswith(f"{path}: ") and "\n" not in str(e.value)


def test_a_single_npy_array_is_refused(tmp_path):
    path = str(tmp_path / "d.npy")
    np.save(path, np.zeros((3, 4, 4), np.uint8))
    with pytest.raises(ValueError, match="a single .npy array, not an npz archive"):
        data.check_dataset(_config(tmp_path, f"npz:{path}"))


def test_nas_train_prints_the_bad_layout_as_its_one_error_line(tmp_path):
    root = write_folder(str(tmp_path / "imgs"), small_arrays())
    named = _folder_case(root, "classes differ")
    env = dict(os.environ, PYTHONPATH=REPO, JAX_PLATFORMS="cpu",
               NAS_DATA_DIR=str(tmp_path / "tfds"))
    r = subprocess.run([sys.executable, "-m", "nas.train.cli",
                        f"--config={REPO}/configs/digits_cnn.py",
                        f"--config.input.data.name=folder:{root}",
                        f"--workdir={tmp_path / 'run'}"],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 1
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("nas-train: error:")]
    assert errors == [f"nas-train: error: {named}: class folders differ between train/ and "
                      f"test/ (only in train/: ['digit2'], only in test/: ['two'])"], r.stderr
    assert "Traceback" not in r.stderr


# ----------------------------------------------------------------------------- training


def test_npz_digits_train_with_a_validation_split(tmp_path):
    """The same training path as every dataset, at another image size than the data's:
    device-resident, with a validation part carved out of train (as a search does)."""
    path = write_npz(str(tmp_path / "d.npz"), digits_arrays(8))
    config = tiny_config(str(tmp_path / "tfds"), total_epochs=2.0,
                         **AT_32)
    config.input.data.name = f"npz:{path}"
    config.input.data.validation_fraction = 0.1
    config.eval.data.split = data.HOLDOUT
    config.eval.test_split = "test"
    assert devdata.supported(config.input.data.name)  # small: trained from the devices
    metrics, epochs, _ = train_and_eval(config, eval_perf=False,
                                        options=TrainOptions(graph=tiny_graph()[0],
                                                             constants=tiny_graph()[1]))
    assert epochs == 2 and metrics.acc > 0.6 and metrics.test_acc > 0.6
    held = data.split_source(config.input, data.HOLDOUT, config.input.data_dir)
    kept = data.split_source(config.input, "train", config.input.data_dir)
    assert len(held) + len(kept) == 1437 and 130 < len(held) < 160


def test_search_config_accepts_user_data(tmp_path):
    from nas.search.strategy import settings

    root = write_folder(str(tmp_path / "imgs"), digits_arrays(8))
    config = runpy.run_path(os.path.join(REPO, "configs", "digits_cnn_search.py"))[
        "get_config"]()
    config.train.input.data.name = f"folder:{root}"
    config.train.input.data_dir = str(tmp_path / "tfds")
    search = settings.validate_search(config)
    decided = settings.decision_config(config.train, search)
    assert decided.eval.data.split == data.HOLDOUT and decided.eval.test_split == "test"
    train = data.split_source(decided.input, "train", decided.input.data_dir)
    held = data.split_source(decided.input, data.HOLDOUT, decided.input.data_dir)
    assert len(train) + len(held) == 1437 and not set(train.indices) & set(held.indices)
    config.train.num_classes = 9
    with pytest.raises(ValueError) as e:
        settings.validate_search(config)
    assert str(e.value) == (f"config field 'train.num_classes' is 9, but dataset "
                            f"'folder:{root}' has 10 class folders (0 takes the number from "
                            f"the data)")
    config.train.num_classes = 0  # the data's: written into the config the study records
    settings.validate_search(config)
    assert config.train.num_classes == 10


@pytest.mark.parametrize("name", ["folder:", "npz:"])
def test_a_user_dataset_name_without_a_path_is_one_line(tmp_path, name):
    with pytest.raises(ValueError) as e:
        data.check_dataset(_config(tmp_path, name))
    assert str(e.value) == (f"config field 'input.data.name': {name!r} names no path "
                            f"(expected 'folder:DIR' or 'npz:FILE')")


@pytest.mark.parametrize("prefix, lead", [("", ""), ("train.", "train: ")])
def test_a_fault_of_the_files_is_named_under_the_section_given(tmp_path, prefix, lead):
    """A fault of a user's files names the file, not a field: nas-train's line starts with
    it, a search's with the section that holds the training config."""
    missing = str(tmp_path / "gone.npz")
    with pytest.raises(ValueError) as e:
        data.check_dataset(_config(tmp_path, f"npz:{missing}"), prefix)
    assert str(e.value) == (f"{lead}{missing}: cannot read the npz file: No such file or "
                            f"directory")
    with pytest.raises(ValueError) as e:
        data.check_dataset(_config(tmp_path, "npz:"), prefix)
    assert str(e.value) == (f"config field '{prefix}input.data.name': 'npz:' names no path "
                            f"(expected 'folder:DIR' or 'npz:FILE')")
    path = write_npz(str(tmp_path / "d.npz"), small_arrays())
    config = _config(tmp_path, f"npz:{path}")
    config.num_classes = 2
    with pytest.raises(ValueError) as e:
        data.check_dataset(config, prefix)
    assert str(e.value) == (f"{path}: labels up to 2, outside config field '{prefix}num_classes'"
                            f" = 2 (labels must be 0..1; 0 takes the number from the data)")
