"""infra/jobs.py: a job's outcome is typed (`JobOutcome`), and kept by arq as the text it always was
(issue 30). Results stay strings in Redis so a worker of either version reads the other's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agent.lease.zone_search import SearchStatus
from infra.jobs import JobOutcome, Outcome
from infra.state.leases import LeaseState

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(("outcome", "stored"), [
    (JobOutcome.ok(), "ok"),
    (JobOutcome.ok("deleted qr-1"), "deleted qr-1"),  # a success says what it did, alone
    (JobOutcome.ok("watching: ACTIVE"), "watching: ACTIVE"),
    (JobOutcome.failed("model key"), "failed: model key"),
    (JobOutcome.failed(), "failed"),
    (JobOutcome.stopped("lease changed"), "stopped: lease changed"),
    (JobOutcome.skipped("lease gone"), "skipped: lease gone"),
    (JobOutcome.retry("channel busy"), "retry: channel busy"),
    (JobOutcome.refused(), "refused"),
    (JobOutcome.failed("timeout", bare=True), "timeout"),  # the words some jobs always stored alone
    (JobOutcome.skipped("not-a-member", bare=True), "not-a-member"),
    # reasons taken from an enum keep the enum's text
    (JobOutcome.failed(SearchStatus.EXHAUSTED.value), "failed: exhausted"),
    (JobOutcome.stopped(LeaseState.FAILED.value), "stopped: FAILED"),
])
def test_each_kind_is_stored_as_the_text_it_always_was(outcome: JobOutcome, stored: str):
    assert outcome.stored() == stored
    assert str(outcome) == stored


def test_the_kind_is_kept_apart_from_the_text():
    assert JobOutcome.failed("model key") == JobOutcome(Outcome.FAILED, "model key")
    assert JobOutcome.failed("timeout", bare=True).outcome is Outcome.FAILED
    assert JobOutcome.ok("deleted qr-1").outcome is Outcome.OK
    assert JobOutcome.failed("model key") != "failed: model key"  # compare outcomes, or their stored text
    with pytest.raises(ValueError):
        Outcome("faild")


MISSPELT = """
from infra.jobs import JobOutcome, Outcome

JobOutcome.faild("model key")
JobOutcome(Outcome.FAILD, "model key")
JobOutcome.failed(3)
"""


def test_a_misspelt_kind_is_a_type_error(tmp_path):
    snippet = tmp_path / "misspelt.py"
    snippet.write_text(MISSPELT)
    mypy = Path(sys.executable).with_name("mypy")
    if not mypy.exists():
        pytest.fail("mypy is not installed beside the interpreter; install the dev extra: pip install -e '.[dev]'")
    # The project's settings and cache (pyproject.toml), on this one file.
    result = subprocess.run([str(mypy), str(snippet)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 1, result.stdout + result.stderr
    assert '"type[JobOutcome]" has no attribute "faild"' in result.stdout
    assert '"type[Outcome]" has no attribute "FAILD"' in result.stdout
    assert 'incompatible type "int"' in result.stdout
