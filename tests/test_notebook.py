"""examples/your_model.ipynb runs top to bottom in a real Jupyter kernel, as a user runs
it: a Flax model imported, arrays in memory, a custom loss, a search with its progress bar
as a widget, the front plotted, the candidates as a DataFrame, the recommendation exported
as Flax code and run without nas, and a second search distilled from the first's answer."""

import os
import shutil

import nbformat
import pytest
from nbclient import NotebookClient

from nas.search.store.study import Study

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOK = os.path.join(ROOT, "examples", "your_model.ipynb")


@pytest.mark.slow  # a kernel and a 4-candidate search: 28 s with warm caches, 115 s cold
def test_the_example_notebook_runs_in_a_kernel(tmp_path, monkeypatch):
    monkeypatch.setenv("NAS_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("PYTHONPATH", ROOT)
    shutil.copy(NOTEBOOK, tmp_path)
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    client = NotebookClient(notebook, timeout=1200, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    outputs = ["".join(o.get("text", "") for o in cell.get("outputs", []))
               for cell in notebook.cells if cell.cell_type == "code"]
    text = "\n".join(outputs)
    assert "recommended:" in text  # the summary
    same = float(text.split("same as nas:")[1].split()[0])
    assert same < 1e-4  # the exported Flax code gives nas's logits
    study = Study.load(tmp_path / "runs" / "your_model")
    assert sum(study.counts().values()) == 4
    student = Study.load(tmp_path / "runs" / "your_model_kd")
    assert student.counts()["done"] == 2  # the distilled search trained with the teacher
    assert (tmp_path / "runs" / "your_model" / "report" / "report.html").is_file()
    shown = [o.get("data", {}) for cell in notebook.cells for o in cell.get("outputs", [])
             if o.get("output_type") == "display_data"]
    assert any("image/png" in d for d in shown), "no front drawn"
    # tqdm.auto's bar is a Jupyter widget there, not text
    assert any("application/vnd.jupyter.widget-view+json" in d for d in shown), shown
    assert any("text/html" in d and "accuracy" in d["text/html"] for d in
               [o.get("data", {}) for cell in notebook.cells for o in cell.get("outputs", [])
                if o.get("output_type") == "execute_result"])  # the DataFrame
    # the saved widgets read the finished counts (4 of 4, then 2 of 2, and each search's
    # finals bar full), not 0
    state = notebook.metadata.get("widgets", {}).get(
        "application/vnd.jupyter.widget-state+json", {}).get("state", {})
    counts = sorted((m["state"].get("value"), m["state"].get("max")) for m in state.values()
                    if m.get("model_name") == "FloatProgressModel")
    assert {(2, 2), (4, 4)} <= set(counts), counts
    assert all(value == total for value, total in counts), counts
