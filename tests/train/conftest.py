"""Shared fixtures: a private tfds data dir with the digits dataset built once per session."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))  # for `helpers`


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory) -> str:
    from nas.train import digits

    path = str(tmp_path_factory.mktemp("tfds"))
    digits.ensure_built(path)
    return path
