"""Several processes or threads building the digits dataset at once end with one good copy."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from nas.train import data, digits


def test_concurrent_first_use_builds_once(tmp_path):
    path = str(tmp_path / "tfds")
    with ThreadPoolExecutor(3) as pool:
        dirs = list(pool.map(lambda _: digits.ensure_built(path), range(3)))
    assert dirs == [path] * 3
    assert len(data.open_source("digits", "train", path)) == 1437
    assert len(data.open_source("digits", "test", path)) == digits.NUM_TEST
