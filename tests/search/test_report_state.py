"""A finished search's rerun names its report without rewriting it while it is current."""

import json

from nas.search import Study
from nas.search.reporting.report_state import STAMP, is_current, write_if_stale


def _study(tmp_path):
    study = Study.create(tmp_path / "s", config={"search": {"max_candidates": 2}})
    cid = study.add('{"candidate": 1}')
    study.tell(cid, {"accuracy": 0.9, "flops": 1e6, "params": 1e4, "val_examples": 100})
    return study


def test_a_current_report_is_kept_and_a_changed_study_rewrites_it(tmp_path):
    study = _study(tmp_path)
    assert not is_current(study)
    html = write_if_stale(study)
    written = html.stat().st_mtime_ns
    assert is_current(study) and write_if_stale(study) == html
    assert html.stat().st_mtime_ns == written  # not rewritten
    failed = study.add('{"candidate": 2}', status="failed", error="boom")
    assert not is_current(study)
    write_if_stale(study)
    assert is_current(study) and f"{failed}" in (html.parent / "report.csv").read_text()


def test_a_missing_file_or_a_damaged_stamp_is_not_current(tmp_path):
    study = _study(tmp_path)
    html = write_if_stale(study)
    (html.parent / "pareto.png").unlink()
    assert not is_current(study)
    write_if_stale(study)
    assert is_current(study)
    (html.parent / STAMP).write_text("{not json")
    assert not is_current(study)
    (html.parent / STAMP).write_text(json.dumps({"counts": {}, "last_id": 1}))
    assert not is_current(study)
