"""Files that more than one stage reads or writes: the exported candidate and atomic writes.

`nas.io` may import `nas.graph` (and `nas.train.checkpoint` for version 1 exports); it never
imports `nas.search`, so training and users read exports without knowing the search.
"""

from nas.io.candidate import ExportedCandidate, load_candidate, write_candidate

__all__ = ["ExportedCandidate", "load_candidate", "write_candidate"]
