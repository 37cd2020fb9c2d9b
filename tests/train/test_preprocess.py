"""`nas.preprocess`: the exact transform a model sees at evaluation, and the `preprocess`
that `nas.export_flax` writes beside `Model`."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from helpers import tiny_graph
from userdata_helpers import digits_arrays, write_npz

import nas
from nas.io.candidate import ExportedCandidate
from nas.train import data as data_lib
from nas.train import extras


def _eval_images(tmp_path, name, image_size, channels=3):
    from ml_collections import ConfigDict

    inp = ConfigDict({"data": {"name": name, "split": "train", "validation_fraction": 0.0},
                      "channels": channels, "image_size": image_size})
    data = data_lib.make_eval_data(name, "test", str(tmp_path / "tfds"), image_size, 64, 1,
                                   inp=inp)
    batches = list(data)
    fed = np.concatenate([b["image"][b["mask"] > 0] for b in batches])
    source = data_lib.open_source(name, "test", str(tmp_path / "tfds"))
    return fed, np.stack([source[i]["image"] for i in range(len(source))])  # stored order


@pytest.mark.parametrize(("size", "channels"), [(8, 3), (16, 1), (6, 3)])
def test_preprocess_is_what_evaluation_feeds_the_model(tmp_path, size, channels):
    arrays = digits_arrays(8)  # greyscale (N, 8, 8)
    name = "npz:" + write_npz(str(tmp_path / "d.npz"), arrays)
    fed, stored = _eval_images(tmp_path, name, size, channels)
    ours = nas.preprocess(stored, image_size=size, channels=channels)
    assert ours.dtype == np.float32 and ours.shape == fed.shape
    np.testing.assert_array_equal(ours, fed)


def test_the_bundled_digits_follow_the_configs_image_size(tmp_path):
    """Stored at 32x32, the digits are resized like any images when a config asks for
    another size (the search tests train at 16x16), not fed at 32 to a model built for 16."""
    fed, stored = _eval_images(tmp_path, "digits", 16)
    assert stored.shape[1:] == (32, 32, 3) and fed.shape[1:] == (16, 16, 3)
    np.testing.assert_array_equal(nas.preprocess(stored, image_size=16), fed)


def test_preprocess_at_the_images_own_size_is_x_over_127_5_minus_1():
    x = np.arange(2 * 4 * 4 * 3, dtype=np.uint8).reshape(2, 4, 4, 3)
    np.testing.assert_array_equal(nas.preprocess(x), x.astype(np.float32) / 127.5 - 1.0)
    assert nas.preprocess(x).min() >= -1.0


def test_preprocess_of_floats_is_one_line():
    with pytest.raises(ValueError, match=r"^preprocess: images have dtype float32 and shape "
                                         r"\(2, 4, 4, 3\), expected uint8"):
        nas.preprocess(np.zeros((2, 4, 4, 3), np.float32))


def _exported(tmp_path, data_name):
    import jax

    from nas.graph import Model

    graph, constants = tiny_graph()
    variables = Model(graph, constants).init(jax.random.PRNGKey(0), np.zeros((1, 8, 8, 3)))
    cand = ExportedCandidate(path="c", graph=graph, constants=constants,
                             variables=jax.tree.map(np.asarray, dict(variables)),
                             input_shape=(8, 8, 3),
                             train_config={"input": {"data": {"name": data_name}}})
    code = nas.export_flax(cand, tmp_path / "code") / "model.py"
    spec = importlib.util.spec_from_file_location("exported_model", code)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module, code.read_text(), cand


def test_the_exported_preprocess_is_nas_preprocess_and_model_says_so(tmp_path):
    module, text, cand = _exported(tmp_path, "npz:/data/x.npz")
    x = np.random.default_rng(0).integers(0, 256, (5, 8, 8, 3), dtype=np.uint8)
    np.testing.assert_array_equal(np.asarray(module.preprocess(x)), nas.preprocess(x))
    assert "as `preprocess` makes them" in module.Model.__doc__
    logits = module.Model().apply(cand.variables, module.preprocess(x))
    np.testing.assert_allclose(np.asarray(logits), np.asarray(cand(nas.preprocess(x))),
                               rtol=1e-5, atol=1e-6)
    assert "x / 127.5 - 1" in text


def test_the_exported_preprocess_of_a_cifar_candidate_normalizes_as_its_training(tmp_path):
    module, _, _ = _exported(tmp_path, "cifar10")
    x = np.random.default_rng(0).integers(0, 256, (3, 8, 8, 3), dtype=np.uint8)
    pp = data_lib.make_preprocess("cifar10", False, 8)
    want = np.stack([pp({"image": im, "label": 0}, None)["image"] for im in x])
    np.testing.assert_allclose(np.asarray(module.preprocess(x)), want, rtol=1e-6, atol=1e-6)


def test_the_pipeline_drops_extras_only_where_told():
    pp = data_lib.make_preprocess("npz:", False, 4, keep_extras=False)
    ex = {"image": np.zeros((4, 4, 3), np.uint8), "label": 1, extras.PREFIX + "w": 3.0}
    assert set(pp(ex, None)) == {"image", "label"}
    assert extras.PREFIX + "w" in data_lib.make_preprocess("npz:", False, 4)(ex, None)
