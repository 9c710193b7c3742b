"""The preflight's verdicts rank one way, for a configuration's checks and for a sweep's
configurations alike."""
import itertools

import pytest

from orchestrator.running.preflight import status_of
from trainers.preflight import Check, PreflightReport
from trainers.verdicts import ERROR, FAIL, PASS, SKIP, WARN, worst


@pytest.mark.parametrize("statuses,expected", [
    ((), PASS), ((SKIP,), PASS), ((PASS, SKIP), PASS), ((SKIP, WARN), WARN),
    ((WARN, ERROR), ERROR), ((ERROR, FAIL, WARN), FAIL), ((FAIL, SKIP), FAIL)])
def test_error_ranks_between_warn_and_fail_and_skip_counts_as_pass(statuses, expected):
    assert worst(statuses) == expected


def test_an_unknown_status_is_refused():
    with pytest.raises(KeyError):
        worst([PASS, "OK"])


@pytest.mark.parametrize("pair", list(itertools.product((PASS, WARN, ERROR, FAIL, SKIP),
                                                        repeat=2)))
def test_a_report_and_a_sweep_of_reports_rank_by_the_same_order(pair):
    report = PreflightReport(checks=[Check(f"c{i}", s, "") for i, s in enumerate(pair)])
    assert report.status == worst(pair)
    results = [{"report": {"status": s}} for s in pair if s != SKIP]
    assert status_of(results) == worst(pair)
