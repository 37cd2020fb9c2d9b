"""Files that more than one stage reads or writes: the exported candidate and atomic writes.

`nas.io` may import `nas.graph` only (a candidate's variables, `nas.io.variables`, live here
too); it never imports `nas.train` or `nas.search`, so training and users read exports
without knowing the search.
"""

from nas.io.candidate import ExportedCandidate, load_candidate, write_candidate

__all__ = ["ExportedCandidate", "load_candidate", "write_candidate"]
