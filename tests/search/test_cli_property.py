"""Property-based: any `--config.*` overrides and flags give either a config that passes
every check (refused here only for its workdir, which is under a file) or one clean
`nas-search: error:` line, exit 1, no traceback, and nothing created."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.search.conftest import SEARCH_CONFIG, run_cli_probe

FIELDS = ["search.seed", "search.max_candidates", "search.workers", "search.executor",
          "search.time_limit_s", "search.hard_time_limit_s", "search.lease_s",
          "search.seed_epochs", "search.mutation.mutator", "search.mutation.max_steps",
          "search.mutation.p", "search.selection.min_acc", "train.lr", "train.total_epochs",
          "train.input.batch_size", "train.trainer", "train.optax_name", "train.ema_decay",
          "search.fidelity.rungs", "search.fidelity.keep", "search.fidelity.cost",
          "train.bogus", "search.bogus", "bogus"]
TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")), max_size=12)
VALUE = st.one_of(st.integers(-5, 10**6).map(str), st.floats(allow_nan=True).map(str), TEXT,
                  st.sampled_from(["True", "none", "[1,2]", "{}", "local", "inline", "''"]))
OVERRIDE = st.builds(lambda f, v: f"--config.{f}={v}", st.sampled_from(FIELDS), VALUE)
EXTRA = st.sampled_from(["--progress", "--noprogress", "--id=3", "--candidate=2",
                         "--wait_s=-1", "--out=", "--bogus_flag=1", "report", "worker", "--"])
ARGV = st.lists(st.one_of(OVERRIDE, OVERRIDE, EXTRA), max_size=4)


# 60 argument lists in two batches: each batch is one probe process, which imports the CLI
@settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(ARGV, min_size=30, max_size=30))
def test_any_arguments_give_one_clean_line(tmp_path_factory, batch):
    tmp = tmp_path_factory.mktemp("cli")
    (tmp / "afile").write_text("x")
    cases = [[f"--config={SEARCH_CONFIG}", f"--workdir={tmp}/afile/study", *args]
             for args in batch]
    for args, (code, stderr) in zip(cases, run_cli_probe(cases), strict=True):
        lines = [ln for ln in stderr.splitlines() if ln.strip()]
        assert code == 1 and "Traceback" not in stderr, (args, code, stderr[-2000:])
        assert len(lines) == 1 and lines[0].startswith("nas-search: error: "), (args, stderr)
    assert sorted(p.name for p in tmp.iterdir()) == ["afile"]
