"""A search's processes import only what every search needs. Each package below costs a
process from a few tenths of a second (aiohttp) to over a second (scipy.stats, pandas) to
import, on 2 cores, and serves one path only (a report's chart, Ray, a dataframe,
TensorBoard, the dashboard, the bundled digits' source; TensorFlow, which tfds takes where
it is installed), so that path imports it when it runs."""

import subprocess
import sys

from tests.search.conftest import ROOT

ENTRY_MODULES = ("nas", "nas.search.api", "nas.search.cli", "nas.search.execution.driver",
                 "nas.search.execution.study_worker", "nas.search.execution.worker")
ON_DEMAND = ("scipy.stats", "sklearn", "matplotlib", "ray", "pandas", "tensorboardX",
             "aiohttp", "tensorflow")


def on_demand_imported(modules: tuple[str, ...], cwd: str) -> list[str]:
    """The `ON_DEMAND` packages a new process has imported once it imports `modules`."""
    probe = (f"import sys\nimport {', '.join(modules)}\n"
             f"print(' '.join(m for m in {ON_DEMAND!r} if m in sys.modules))")
    run = subprocess.run([sys.executable, "-c", probe], cwd=cwd, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    return run.stdout.split()


def test_the_search_entry_modules_import_no_package_of_one_path():
    assert on_demand_imported(ENTRY_MODULES, ROOT) == []


def test_the_probe_sees_an_import(tmp_path):
    (tmp_path / "heavy.py").write_text("import scipy.stats\n")
    assert on_demand_imported(("heavy",), str(tmp_path)) == ["scipy.stats"]
