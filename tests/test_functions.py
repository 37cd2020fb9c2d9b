"""`nas.functions`: a user's function named, digested the same in every process, changed
code noticed, shipped by value."""

import os
import subprocess
import sys

import numpy as np
import pytest

from nas import functions as fn_lib
from tests.search._user_functions import offset_loss

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_digest_of_a_function_is_the_same_in_another_process():
    code = ("from nas.functions import digest_of; from tests.search._user_functions import "
            "offset_loss; print(digest_of(offset_loss))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=ROOT, PYTHONHASHSEED="123"),
                         timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == fn_lib.digest_of(offset_loss)


def test_changed_code_or_closed_over_values_change_the_digest():
    def scaled(k):
        return lambda x: x * k

    def other(x):
        return x + 1

    def same_name(x):
        return x + 2

    assert fn_lib.digest_of(scaled(2)) == fn_lib.digest_of(scaled(2))
    assert fn_lib.digest_of(scaled(2)) != fn_lib.digest_of(scaled(3))
    assert fn_lib.digest_of(other) != fn_lib.digest_of(same_name)


def test_a_function_travels_by_value_with_what_it_closes_over():
    k = 7
    packed = fn_lib.pack({"loss": lambda x: x * k})
    assert fn_lib.unpack(packed)["loss"](3) == 21
    assert fn_lib.unpack(None) == {}
    assert fn_lib.name_of(offset_loss) == "tests.search._user_functions:offset_loss"


def test_a_name_that_cannot_be_imported_is_one_line():
    assert fn_lib.resolve("tests.search._user_functions:offset_loss", "f") is offset_loss
    with pytest.raises(ValueError, match=r"train\.loss: expected 'package\.module:function', "
                                         r"got 'nocolon'"):
        fn_lib.resolve("nocolon", "train.loss")
    with pytest.raises(ValueError, match=r"f: cannot import 'no_such_module:f' here"):
        fn_lib.resolve("no_such_module:f", "f")
    with pytest.raises(ValueError, match=r"f: 'tests.search._user_functions:OFFSET' is a "
                                         r"float, not a function"):
        fn_lib.resolve("tests.search._user_functions:OFFSET", "f")


def test_a_function_of_the_users_own_module_travels_with_its_code(tmp_path):
    """A Ray node has the installed packages, not the user's project: a function from a
    module of theirs (here the tests') must run where that module cannot be imported."""
    packed = tmp_path / "packed.bin"
    packed.write_bytes(fn_lib.pack({"loss": offset_loss}))
    code = ("import sys, numpy as np; from nas.functions import unpack; "
            "f = unpack(open(sys.argv[1], 'rb').read())['loss']; "
            "print(float(f(np.zeros((2, 3), np.float32), np.array([0, 1]))))")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    run = subprocess.run([sys.executable, "-c", code, str(packed)], capture_output=True,
                         text=True, env=env, cwd=tmp_path, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert abs(float(run.stdout) - (100.0 + np.log(3))) < 1e-4
