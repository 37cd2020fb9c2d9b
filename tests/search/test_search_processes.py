"""nas-search over several processes (jax.distributed) is refused in one line, in every
process, before anything is written: nothing would follow its driver across hosts."""

import os
import subprocess
import sys

import pytest

from tests.search.conftest import ROOT, SEARCH_CONFIG


@pytest.mark.parametrize("env, args", [
    ({"NAS_CLUSTER_DETECTION": "auto"}, []),  # as many processes as the cluster started
    ({}, ["--config.train.distributed.coordinator_address=127.0.0.1:1234",
          "--config.train.distributed.num_processes=2",
          "--config.train.distributed.process_id=1"]),
])
def test_a_search_over_several_processes_is_refused_in_one_line(tmp_path, env, args):
    clean = {k: v for k, v in os.environ.items() if not k.startswith("NAS_")}
    proc = subprocess.run([sys.executable, "-m", "nas.search.cli", f"--config={SEARCH_CONFIG}",
                           f"--workdir={tmp_path}/study", *args],
                          env={**clean, "PYTHONPATH": ROOT, **env}, capture_output=True,
                          text=True, timeout=300)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr[-2000:]
    assert lines[0].startswith("nas-search: error: a search over several processes is not "
                               "supported yet"), lines
    assert "nas-train --graph=CANDIDATE.zip" in lines[0], lines
    assert not (tmp_path / "study").exists()


def test_a_search_config_that_asks_for_several_processes_is_refused_from_python():
    import runpy

    from nas.search.strategy.settings import validate_search

    config = runpy.run_path(SEARCH_CONFIG)["get_config"]()
    config.train.distributed.update(coordinator_address="127.0.0.1:1234", num_processes=2,
                                    process_id=0)
    with pytest.raises(ValueError, match=r"^config field 'train\.distributed': a search over "
                                         r"several processes is not supported yet"):
        validate_search(config)
