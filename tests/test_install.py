"""A folder named `nas` beside a user's script (a clone in `work/nas`, a script run from
`work/`) must not hide the installed package: the README and CI install the clone in
setuptools' `compat` editable mode, which puts it on a path entry, where a regular package
wins over a namespace folder found earlier. (The default `strict` mode installs an import
hook that runs after the path search, and loses to the folder.)"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROBE = ("import nas; print(nas.__file__); "
         "assert 'from_flax' in nas.__all__ and callable(nas.__getattr__)")


def _install_commands() -> list[str]:
    out = []
    for name in ("README.md", os.path.join(".ci", "run")):
        with open(os.path.join(ROOT, name)) as f:
            out += [line for line in f if re.search(r"pip install[^\n]* -e ", line)]
    return out


def test_every_editable_install_the_readme_and_ci_run_is_in_compat_mode():
    commands = _install_commands()
    assert len(commands) >= 3, commands
    for line in commands:
        assert "--config-settings editable_mode=compat" in line, line


def _beside_a_nas_folder(tmp_path):
    work = tmp_path / "work"
    (work / "nas").mkdir(parents=True)  # e.g. the clone itself, or a folder of results
    (work / "nas" / "notes.txt").write_text("not the package")
    return work


def test_a_script_beside_a_folder_named_nas_imports_the_package_on_its_path_entry(tmp_path):
    """The clone on a path entry, as the compat install's .pth file puts it."""
    work = _beside_a_nas_folder(tmp_path)
    (work / "script.py").write_text(PROBE + "\n")
    env = dict(os.environ, PYTHONPATH=ROOT)
    run = subprocess.run([sys.executable, "script.py"], cwd=work, env=env,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == os.path.join(ROOT, "nas", "__init__.py")


@pytest.mark.slow  # a fresh virtualenv and the README's install (about 20 s, needs an index)
def test_the_readmes_install_in_a_fresh_venv_is_not_hidden_by_a_nas_folder(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", "-e",
           ROOT, "--config-settings", "editable_mode=compat"]
    install = subprocess.run(pip, capture_output=True, text=True, timeout=600)
    assert install.returncode == 0, install.stderr[-2000:]
    work = _beside_a_nas_folder(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    run = subprocess.run([str(venv / "bin" / "python"), "-c", PROBE], cwd=work, env=env,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == os.path.join(ROOT, "nas", "__init__.py")
