"""`nas-train` on users' own copies of the digits (`folder:` of 8x8 PNGs, `npz:` of 16x16
arrays, both greyscale, trained at 32x32x3) reaches the bundled digits' accuracy.

About a minute each on 2 CPU cores: slow."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from userdata_helpers import digits_arrays, write_folder, write_npz

from nas.train import userdata

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _nas_train(tmp_path, name: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=REPO, JAX_PLATFORMS="cpu",
               NAS_DATA_DIR=str(tmp_path / "tfds"))
    return subprocess.run([sys.executable, "-m", "nas.train.cli",
                           f"--config={REPO}/configs/digits_cnn.py",
                           f"--config.input.data.name={name}", "--config.total_epochs=3",
                           f"--workdir={tmp_path / 'run'}"],
                          capture_output=True, text=True, env=env, timeout=900)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["folder", "npz"])
def test_nas_train_reaches_90_percent_in_3_epochs(tmp_path, capsys, kind):
    if kind == "folder":
        name = "folder:" + write_folder(str(tmp_path / "digits"), digits_arrays(8))
    else:
        name = "npz:" + write_npz(str(tmp_path / "digits.npz"), digits_arrays(16))
    r = _nas_train(tmp_path, name)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.count("to array_record in") == 1
    acc = float(re.search(r"^test accuracy\s+([\d.]+) %", r.stdout, re.M).group(1))
    assert acc >= 90.0, r.stdout[-1500:]
    assert re.search(r"^epochs / steps\s+3 / ", r.stdout, re.M)
    # The second use opens the same array_record folder, converting nothing.
    data_dir = str(tmp_path / "tfds")
    converted = os.listdir(os.path.join(data_dir, userdata.SUBDIR))
    assert userdata.converted_dir(name, data_dir).rsplit("/", 1)[-1] in converted
    assert capsys.readouterr().out == ""
    assert os.listdir(os.path.join(data_dir, userdata.SUBDIR)) == converted
