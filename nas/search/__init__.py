"""Search: durable study store, Pareto parent selection, reports.

`from nas.search import Study` is the entry point; `nas.search.report` (matplotlib) is
imported only on demand.
"""

from nas.search.candidate import METRICS, STATUSES, Candidate
from nas.search.pareto import ParetoCurve
from nas.search.selection import Individual, SelectionConfig, select_parents
from nas.search.study import DuplicateCandidateError, Study, StudyNotFoundError

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
