"""Subprocess used by the study tests: real processes contending for one study.

usage: python _study_worker.py MODE WORKDIR [ARG]
  claim-all NAME   say ready, wait for WORKDIR/go, claim+tell until none is pending, print ids
  claim-hold NAME  claim one candidate, print its id, then sleep until killed
  add-loop         add candidates forever, each with state {"added": n}, until killed
"""

import json
import sys
import time
from pathlib import Path

from nas.search import Study


def main() -> None:
    mode, workdir = sys.argv[1], sys.argv[2]
    study = Study.load(workdir)
    if mode == "claim-all":
        (Path(workdir) / f"ready-{sys.argv[3]}").touch()
        go = Path(workdir) / "go"
        while not go.exists():
            time.sleep(0.005)
        ids = []
        while (cand := study.claim(worker=sys.argv[3])) is not None:
            ids.append(cand.id)
            time.sleep(0.002)  # "training": lets the others get the lock in between
            study.tell(cand.id, {"accuracy": cand.id / 100})
        print(json.dumps(ids), flush=True)
    elif mode == "claim-hold":
        cand = study.claim(worker=sys.argv[3])
        print(cand.id if cand else -1, flush=True)
        time.sleep(600)
    elif mode == "add-loop":
        n = study.get_state("added", 0)
        print("ready", flush=True)
        while True:
            n += 1
            study.add(json.dumps({"n": n, "pad": "x" * 2000}), state={"added": n})
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
