"""The install a user types, `pip install -e .`, must give a `nas` that a folder named `nas`
beside their script (a clone in `work/nas`, a script run from `work/`) cannot hide, and the
distribution must declare its own name, its license and its commands.

hatchling's editable install writes a .pth file naming the project root: a plain path entry,
and on a path entry the regular package wins over a namespace folder found earlier on
sys.path. (setuptools' default editable mode installs an import hook that runs after the
path search and loses to the folder, which is why the build backend is hatchling.)"""

from __future__ import annotations

import ast
import glob
import os
import re
import subprocess
import sys
import tomllib

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROBE = ("import nas; print(nas.__file__); "
         "assert 'from_flax' in nas.__all__ and callable(nas.__getattr__); "
         "assert callable(nas.run_search)")
DIST = "alphanas-search"


def _pyproject() -> dict:
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)


def _user_facing_files() -> list[str]:
    """What tells a user how to install: the README, CI, the docs and the package's own
    messages."""
    files = [os.path.join(ROOT, "README.md"), os.path.join(ROOT, ".ci", "run")]
    files += glob.glob(os.path.join(ROOT, "docs", "*.md"))
    files += glob.glob(os.path.join(ROOT, "nas", "**", "*.py"), recursive=True)
    return files


def test_the_distribution_has_a_name_of_its_own_license_and_commands():
    meta = _pyproject()
    project = meta["project"]
    # the index's `nas` is an unrelated project: installing by that name fetches its code
    assert project["name"] == DIST
    assert project["license"] == "Apache-2.0"
    assert project["license-files"] == ["LICENSE"]
    with open(os.path.join(ROOT, "LICENSE")) as f:
        text = f.read()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text  # the full text, not a pointer to it
    assert {"test", "notebook", "ray", "bench"} <= set(project["optional-dependencies"])
    assert meta["build-system"]["build-backend"] == "hatchling.build"
    assert meta["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"] == ["nas"]


@pytest.mark.parametrize("command", ["nas-search", "nas-train"])
def test_each_command_points_at_a_main_that_exists(command):
    target = _pyproject()["project"]["scripts"][command]
    module, func = target.split(":")
    path = os.path.join(ROOT, *module.split(".")) + ".py"
    with open(path) as f:
        tree = ast.parse(f.read())
    names = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    assert func in names, (command, target)


def test_no_install_line_needs_a_workaround_or_fetches_the_other_nas():
    compat, other = [], []
    for path in _user_facing_files():
        with open(path, encoding="utf-8") as f:
            for i, line in enumerate(f, 1):
                where = f"{os.path.relpath(path, ROOT)}:{i}: {line.strip()}"
                if "editable_mode" in line:
                    compat.append(where)
                if re.search(r"""pip install[^\n]*["' ]nas\[""", line):
                    other.append(where)
    assert not compat, compat
    assert not other, other


def test_the_readme_and_ci_install_the_clone_editable():
    lines = []
    for name in ("README.md", os.path.join(".ci", "run")):
        with open(os.path.join(ROOT, name)) as f:
            lines += [line for line in f if re.search(r"pip install[^\n]* -e ", line)]
    assert len(lines) >= 3, lines


def _beside_a_nas_folder(tmp_path):
    work = tmp_path / "work"
    (work / "nas").mkdir(parents=True)  # e.g. the clone itself, or a folder of results
    (work / "nas" / "notes.txt").write_text("not the package")
    return work


def test_a_script_beside_a_folder_named_nas_imports_the_package_on_its_path_entry(tmp_path):
    """The project root on a path entry, as the editable install's .pth file puts it."""
    work = _beside_a_nas_folder(tmp_path)
    (work / "script.py").write_text(PROBE + "\n")
    env = dict(os.environ, PYTHONPATH=ROOT)
    run = subprocess.run([sys.executable, "script.py"], cwd=work, env=env,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == os.path.join(ROOT, "nas", "__init__.py")


@pytest.mark.slow  # a fresh virtualenv and a plain editable install (needs hatchling: an index)
def test_a_plain_editable_install_in_a_fresh_venv_is_not_hidden_by_a_nas_folder(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", "-e", ROOT]
    install = subprocess.run(pip, capture_output=True, text=True, timeout=600)
    assert install.returncode == 0, install.stderr[-2000:]
    site = subprocess.run([str(venv / "bin" / "python"), "-c",
                           "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          capture_output=True, text=True, check=True).stdout.strip()
    pth = [p for p in os.listdir(site) if p.endswith(".pth") and "alphanas" in p]
    assert len(pth) == 1, os.listdir(site)
    with open(os.path.join(site, pth[0])) as f:
        assert f.read().split() == [ROOT]  # a path entry, no import hook
    work = _beside_a_nas_folder(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    # a script would import the rest of nas's dependencies, which --no-deps left out: the
    # probe asks only which `nas` is found
    probe = ("import importlib.util as u; s = u.find_spec('nas'); "
             "print(s.origin)")
    run = subprocess.run([str(venv / "bin" / "python"), "-c", probe], cwd=work, env=env,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == os.path.join(ROOT, "nas", "__init__.py")
