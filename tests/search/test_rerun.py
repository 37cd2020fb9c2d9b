"""A finished search's rerun is answered from the study's counts, without the driver,
only when nothing but operational fields differs from the stored config."""

import runpy

from nas.search import Study
from nas.search.reporting.report_state import finished_line
from nas.search.strategy.settings import validate_search
from tests.search.conftest import SEARCH_CONFIG


def _config(**search):
    config = runpy.run_path(SEARCH_CONFIG)["get_config"]()
    config.search.finals = {"k": 0}  # finished when its candidates are
    config.search.update(search)
    validate_search(config)  # as the driver stores it
    return config


def test_finished_line_only_for_a_finished_study_with_the_same_decisions(tmp_path):
    workdir = str(tmp_path / "s")
    assert finished_line(workdir, _config()) is None  # no study
    study = Study.create(workdir, config=_config(max_candidates=2).to_dict())
    done = study.add('{"candidate": 1}')
    study.tell(done, {"accuracy": 0.9, "flops": 1e6, "params": 1e4})
    assert finished_line(workdir, _config(max_candidates=2)) is None  # 1 of 2
    study.add('{"candidate": 2}', status="failed", error="diverged")
    line = finished_line(workdir, _config(max_candidates=2, workers=3))  # operational
    assert line == (f"the search in {workdir} is finished (done 1, failed 1; "
                    f"max_candidates 2); report: {tmp_path / 's' / 'report' / 'report.html'}")
    assert finished_line(workdir, _config(max_candidates=3)) is None  # asks for more
    assert finished_line(workdir, _config(max_candidates=2, seed=7)) is None  # the driver
    # names the ignored value
