"""What each kind of process pays to import its entry module, this tree against a revision.

Every `nas-search`/`nas-train` call, every `run_search` caller, every worker process and
every exported model's runner imports its entry module before it does anything, so a slow
import is paid once per process, many times per search. This benchmark makes a git worktree
of REV, then imports each entry module in a new process under this tree and under REV,
taking turns (the same venv and packages for both), and prints the medians and their ratio.

    python benchmarks/import_time.py [--rev HEAD] [--rounds 7] [--module M ...]

Run it in the project's venv. Each import runs in its tree's root, so that tree's `nas` is
found before the editable install's. Neither tree should hold byte-compiled files
the other lacks (`__pycache__`), or the comparison measures those.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODULES = (
    "nas.search.execution.driver",  # a search's own process (`nas-search`, `run_search`)
    "nas.search.execution.study_worker",  # an external worker (`nas-search worker`)
    "nas.search.execution.worker",  # a local or Ray worker process
    "nas.train.cli",  # `nas-train`
    "nas",  # `import nas` in a user's code
)
SNIPPET = ("import time; t = time.perf_counter(); import {module}; "
           "print(time.perf_counter() - t)")


def import_seconds(tree: Path, module: str) -> float:
    """Seconds one new process takes to import `module` from `tree`'s `nas`."""
    # `python -c` puts its working directory first on the path, ahead of the editable install
    out = subprocess.run([sys.executable, "-c", SNIPPET.format(module=module)], cwd=tree,
                         capture_output=True, text=True, check=True)
    return float(out.stdout.split()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rev", default="HEAD", help="the revision to compare against")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--module", action="append", help="an entry module (repeatable)")
    args = parser.parse_args()
    modules = tuple(args.module or MODULES)
    with tempfile.TemporaryDirectory(prefix="import_time_") as scratch:
        base = Path(scratch) / "rev"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(base),
                        args.rev], check=True)
        try:
            times: dict[tuple[str, str], list[float]] = {}
            for module in modules:  # once each, unmeasured: the OS caches the files
                for tree in (ROOT, base):
                    import_seconds(tree, module)
            trees = [("tree", ROOT), ("rev", base)]
            for _ in range(args.rounds):
                trees.reverse()  # each goes first in every other round
                for module in modules:
                    for name, tree in trees:
                        times.setdefault((name, module), []).append(
                            import_seconds(tree, module))
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force",
                            str(base)], check=True)
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    print(f"{args.rounds} imports of each in turns, this tree against {args.rev}; load {load}")
    print(f"{'module':40} {'tree s':>8} {'rev s':>8} {'tree/rev':>9}")
    for module in modules:
        tree, rev = (statistics.median(times[name, module]) for name in ("tree", "rev"))
        print(f"{module:40} {tree:8.2f} {rev:8.2f} {tree / rev:9.2f}")


if __name__ == "__main__":
    main()
