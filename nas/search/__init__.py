"""The search, in four layers, each importing only those before it: `strategy` (how it
decides), `store` (the SQLite study), `execution` (running it), `reporting` (what people
read); `api` and `cli` on top. The report (matplotlib) is imported only on demand.
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
