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

from nas.search.store.candidate import METRICS, STATUSES, Candidate, Inheritance, Status
from nas.search.store.study import DuplicateCandidateError, Study, StudyNotFoundError
from nas.search.strategy.pareto import ParetoCurve
from nas.search.strategy.selection import Individual, SelectionConfig, select_parents

__all__ = [
    "METRICS",
    "STATUSES",
    "Candidate",
    "DuplicateCandidateError",
    "Individual",
    "Inheritance",
    "ParetoCurve",
    "SelectionConfig",
    "Status",
    "Study",
    "StudyNotFoundError",
    "select_parents",
]
