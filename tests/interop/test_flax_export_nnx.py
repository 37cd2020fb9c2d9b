"""`export_flax` of an NNX seed writes NNX code (`api="nnx"`, the seed's by default): its
`Model` is an nnx.Module that runs without nas, with the candidate's logits."""

from __future__ import annotations

import json
import subprocess
import sys

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import nas

RUNNER = """
import json, sys
sys.path.insert(0, sys.argv[1])
import flax.serialization, numpy as np
from flax import nnx
import model as exported
assert "nas" not in sys.modules
with open(sys.argv[1] + "/variables.msgpack", "rb") as f:
    variables = flax.serialization.msgpack_restore(f.read())
m = exported.from_variables(variables)
x = np.load(sys.argv[2])
logits = np.asarray(m(exported.preprocess(x)))
grads = nnx.grad(lambda mdl: (mdl(exported.preprocess(x), train=True) ** 2).mean())(m)
np.save(sys.argv[3], logits)
print(json.dumps({"is_nnx": isinstance(m, nnx.Module),
                  "grad_leaves": len(nnx.state(grads, nnx.Param).flat_state())}))
"""


class Small(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.conv = nnx.Conv(3, 8, (3, 3), rngs=rngs)
        self.bn = nnx.BatchNorm(8, rngs=rngs)
        self.head = nnx.Linear(8, 10, rngs=rngs)

    def __call__(self, x):
        x = nnx.relu(self.bn(self.conv(x)))
        return self.head(jnp.mean(x, axis=(1, 2)))


@pytest.fixture(scope="module")
def nnx_seed():
    model = Small(nnx.Rngs(0))
    model.eval()
    return nas.from_flax(model, jnp.zeros((1, 8, 8, 3)))


def test_an_nnx_seed_exports_nnx_code_that_runs_without_nas(nnx_seed, tmp_path):
    assert nnx_seed.info["api"] == "nnx"
    code = nas.export_flax(nnx_seed, tmp_path / "code")
    text = (code / "model.py").read_text()
    assert "class Model(nnx.Module):" in text and "class LinenModel(nn.Module):" in text
    x = np.random.default_rng(0).integers(0, 256, (4, 8, 8, 3), dtype=np.uint8)
    np.save(tmp_path / "x.npy", x)
    run = subprocess.run([sys.executable, "-I", "-B", "-c", RUNNER, str(code),
                          str(tmp_path / "x.npy"), str(tmp_path / "out.npy")],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    told = json.loads(run.stdout.strip().splitlines()[-1])
    assert told["is_nnx"] and told["grad_leaves"] == 6  # conv, bn, head: kernel/scale, bias
    want = np.asarray(nnx_seed(nas.preprocess(x)))
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), want, rtol=1e-5, atol=1e-6)


def test_linen_code_for_an_nnx_seed_on_request_and_a_bad_api_is_one_line(nnx_seed, tmp_path):
    text = (nas.export_flax(nnx_seed, tmp_path / "linen", api="linen") / "model.py").read_text()
    assert "class Model(nn.Module):" in text and "nnx" not in text
    with pytest.raises(ValueError, match=r"^export_flax: api must be 'linen' or 'nnx', got "
                                         r"'torch'$"):
        nas.export_flax(nnx_seed, tmp_path / "bad", api="torch")
