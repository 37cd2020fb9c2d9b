"""The search, in four layers (each imports only those before it, `tests/test_layering.py`):

- `strategy`: how it decides (Pareto fronts, selection, noise ties, paired comparisons,
  fidelity rungs, validation splits, the seed and its settings);
- `store`: the durable SQLite study (schema, candidate rows, leases, the recommendation,
  exports);
- `execution`: running it (the driver loop, executors, workers, device turns, fitting);
- `reporting`: what people read (summary, HTML report, candidate pages, SVG, dashboard);

with `cli` (nas-search) on top. `from nas.search import Study` is the entry point; the
report (matplotlib) is imported only on demand.
"""

import importlib.abc
import importlib.util
import sys
from types import ModuleType
from typing import Any

from nas.search.store.candidate import METRICS, STATUSES, Candidate
from nas.search.store.study import DuplicateCandidateError, Study, StudyNotFoundError
from nas.search.strategy.pareto import ParetoCurve
from nas.search.strategy.selection import Individual, SelectionConfig, select_parents

__all__ = [
    "METRICS",
    "STATUSES",
    "Candidate",
    "DuplicateCandidateError",
    "Individual",
    "ParetoCurve",
    "SelectionConfig",
    "Study",
    "StudyNotFoundError",
    "select_parents",
]


# Modules that moved into the subpackages answer to their old paths too (users' code and
# pickles name them): importing `nas.search.study` gives `nas.search.store.study` itself.
_MOVED = {
    "blocks": "nas.search.strategy.blocks",
    "candidate": "nas.search.store.candidate",
    "dashboard": "nas.search.reporting.dashboard",
    "device_turns": "nas.search.execution.device_turns",
    "driver": "nas.search.execution.driver",
    "executors": "nas.search.execution.executors",
    "export": "nas.search.store.export",
    "fidelity": "nas.search.strategy.fidelity",
    "fit": "nas.search.execution.fit",
    "import_flax": "nas.search.strategy.import_flax",
    "intervals": "nas.search.strategy.intervals",
    "lease": "nas.search.store.lease",
    "paired": "nas.search.strategy.paired",
    "pareto": "nas.search.strategy.pareto",
    "population": "nas.search.strategy.population",
    "recommend": "nas.search.store.recommend",
    "report": "nas.search.reporting.report",
    "report_candidate": "nas.search.reporting.report_candidate",
    "report_state": "nas.search.reporting.report_state",
    "rerun": "nas.search.reporting.rerun",
    "seed": "nas.search.strategy.seed",
    "selection": "nas.search.strategy.selection",
    "settings": "nas.search.strategy.settings",
    "splits": "nas.search.strategy.splits",
    "study": "nas.search.store.study",
    "study_worker": "nas.search.execution.study_worker",
    "svg": "nas.search.reporting.svg",
    "worker": "nas.search.execution.worker",
}


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self) -> None:
        self._specs: dict[str, Any] = {}  # module name -> its own spec

    def find_spec(self, fullname: str, path: object, target: object = None) -> Any:
        old = fullname.removeprefix(__name__ + ".")
        return importlib.util.spec_from_loader(fullname, self) if old in _MOVED else None

    def create_module(self, spec: Any) -> ModuleType:
        module = importlib.import_module(_MOVED[spec.name.removeprefix(__name__ + ".")])
        self._specs[module.__name__] = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the module was imported at its new place. The import system has
        just given it the old name's spec; it keeps its own (its name, its file)."""
        module.__spec__ = self._specs.pop(module.__name__)


sys.meta_path.append(_MovedModules())
