"""The suite runs in parallel (pytest-xdist, configured in pyproject.toml) without two tests ever
sharing a Redis database: what the README's test command does, and what keeps it honest."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from conftest import (TEST_DATABASES, TIER_SECONDS, TIERS, file_seconds, handout_order,
                      pytest_xdist_auto_num_workers, worker_databases)

ROOT = Path(__file__).resolve().parent.parent


def test_the_readme_command_runs_whole_files_on_parallel_workers():
    options = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["pytest"]["ini_options"]
    addopts = options["addopts"]
    assert addopts[addopts.index("-n") + 1] == "auto"
    # loadfile: a module-scoped fixture (tests/test_hostile_input.py's stack on its own database) is
    # set up in one process, and that file's tests run there in file order.
    assert addopts[addopts.index("--dist") + 1] == "loadfile"
    assert "--no-loadscope-reorder" in addopts  # files in collection order, the long ones spread out


def test_auto_starts_one_worker_more_than_twice_the_cores(monkeypatch):
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert pytest_xdist_auto_num_workers(None) == 5
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    assert "whole files at a time on one process more than twice the machine's cores" in readme
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(64)), raising=False)
    assert pytest_xdist_auto_num_workers(None) == len(TEST_DATABASES)  # one database each at most


@pytest.mark.parametrize("count", range(1, len(TEST_DATABASES) + 1))
def test_workers_on_one_shared_server_never_share_a_database(count):
    slices = [worker_databases(shared=True, worker=f"gw{i}", count=count) for i in range(count)]
    assert all(slices)
    assert sorted(db for databases in slices for db in databases) == list(TEST_DATABASES)
    assert 0 not in TEST_DATABASES  # the claims' own


def test_a_worker_with_its_own_server_or_no_xdist_takes_every_database():
    assert worker_databases(shared=False, worker="gw1", count=3) == list(TEST_DATABASES)
    assert worker_databases(shared=True, worker="", count=1) == list(TEST_DATABASES)


def test_more_workers_than_databases_on_a_shared_server_is_one_line_saying_what_to_do():
    with pytest.raises(pytest.fail.Exception, match=r"REDIS_URL is set: .* run with -n 15 or fewer, or unset REDIS_URL"):
        worker_databases(shared=True, worker="gw0", count=16)


def test_two_sessions_on_one_server_never_claim_the_same_database(redis_server_url):
    """Two pytest sessions (two checkouts on one machine) pointed at one REDIS_URL walk the same numbers
    in the same order; the claim in database 0 makes the second skip what the first is using."""
    import itertools

    from conftest import claim_database, release_database

    base = redis_server_url.rsplit("/", 1)[0] if redis_server_url.count("/") > 2 else redis_server_url
    first, second = itertools.cycle(TEST_DATABASES), itertools.cycle(TEST_DATABASES)
    held = [claim_database(base, first, "session-a") for _ in range(3)]
    theirs = claim_database(base, second, "session-b")
    try:
        assert theirs not in held
        release_database(base, held[0], "session-b")  # not its claim: nothing happens
        assert claim_database(base, itertools.cycle([held[0], theirs + 1]), "session-b") == theirs + 1
    finally:
        for number in held:
            release_database(base, number, "session-a")
        release_database(base, theirs, "session-b")
        release_database(base, theirs + 1, "session-b")


def test_every_test_is_in_exactly_one_tier_and_the_readme_says_how_to_run_each(request):
    from conftest import TIERS

    items = request.session.items
    assert items, "this test runs inside a collected session"
    for item in items:
        marked = [tier for tier in TIERS if item.get_closest_marker(tier)]
        assert len(marked) == 1, f"{item.nodeid} is in tiers {marked}"
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for tier in TIERS:
        assert f"`.venv/bin/pytest -q -m {tier}`" in readme


def test_a_test_on_the_full_stack_is_end_to_end_and_one_on_redis_alone_is_in_process():
    def collected(tier: str) -> set[str]:
        done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-n", "0", "-m", tier,
                               "tests/test_slack_lifecycle.py", "tests/test_unit_actions.py"],
                              cwd=ROOT, capture_output=True, text=True, timeout=120)
        return {line.split("::")[0] for line in done.stdout.splitlines() if "::" in line}

    assert collected("e2e") == {"tests/test_slack_lifecycle.py"}
    assert collected("inprocess") == {"tests/test_unit_actions.py"}


def test_files_are_handed_out_longest_first(request):
    """By the seconds each took in the recorded run (tests/file_seconds.json), else by its tier's."""
    recorded = file_seconds()
    estimates: dict[str, float] = {}
    for item in request.session.items:  # in the order xdist hands files out
        tier = next(t for t in reversed(TIERS) if item.get_closest_marker(t))
        name = item.nodeid.split("::")[0]
        assert name in list(estimates)[-1:] or name not in estimates, f"{name}'s tests are not together"
        estimates[name] = recorded.get(name, max(estimates.get(name, 0.0), TIER_SECONDS[tier]))
    seconds = list(estimates.values())
    assert seconds == sorted(seconds, reverse=True)


def test_a_recorded_file_goes_by_its_seconds_and_a_new_one_by_its_tier():
    tiers = {"tests/test_slow_unit.py": "unit", "tests/test_new_e2e.py": "e2e", "tests/test_quick_e2e.py": "e2e",
             "tests/test_new_unit.py": "unit"}
    recorded = {"tests/test_slow_unit.py": 40.0, "tests/test_quick_e2e.py": 2.0}
    assert handout_order(tiers, recorded) == ["tests/test_slow_unit.py", "tests/test_new_e2e.py",
                                              "tests/test_quick_e2e.py", "tests/test_new_unit.py"]


def test_record_file_seconds_writes_what_each_file_took(tmp_path):
    (tmp_path / "conftest.py").write_text((ROOT / "tests" / "conftest.py").read_text(encoding="utf-8"))
    (tmp_path / "test_a.py").write_text("def test_one():\n    pass\n")
    (tmp_path / "test_b.py").write_text("import time\n\n\ndef test_two():\n    time.sleep(0.2)  # the file's work\n")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--record-file-seconds"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "tests")})  # the conftest's helpers
    assert done.returncode == 0, done.stdout + done.stderr
    written = json.loads((tmp_path / "file_seconds.json").read_text(encoding="utf-8"))
    assert list(written) == ["test_b.py", "test_a.py"] and written["test_b.py"] >= 0.2


def test_an_in_process_bot_is_in_process_work(request, make_bot):
    """make_bot's LocalStack runs the emulators only: no web server is seen, and a test on it is
    in the in-process tier, as is one whose own `slack` fixture builds on it (test_access)."""
    import conftest

    bot = make_bot()
    assert bot.signed_requests().slash("status", user="UALICE", channel="C0TIER").status == 200
    assert conftest._full_stack_seen == []
    assert request.node.get_closest_marker("inprocess") and not request.node.get_closest_marker("e2e")


@pytest.mark.e2e
def test_a_local_stack_or_our_process_is_seen_as_end_to_end_work():
    """conftest's audit hook sees what makes a test end to end, whatever fixtures it uses: a test in a
    lower tier that does either fails (end_to_end_work_is_marked_e2e)."""
    import conftest
    from bot.local_stack import _UvicornThread

    conftest._full_stack_seen.clear()
    web = _UvicornThread(lambda scope, receive, send: None)
    web.socket.close()
    assert conftest._full_stack_seen == ["started a LocalStack's web app"]
    conftest._full_stack_seen.clear()
    subprocess.run([str(Path(sys.executable).with_name("tpubot")), "--help"], capture_output=True, timeout=60)
    assert conftest._full_stack_seen and "started our process" in conftest._full_stack_seen[0]
    conftest._full_stack_seen.clear()
    subprocess.run([sys.executable, "-c", "pass"], timeout=60)  # any other process is not ours
    assert conftest._full_stack_seen == []
    assert conftest._is_our_process([sys.executable, "-m", "bot.cli", "serve"])
    assert not conftest._is_our_process([sys.executable, "-m", "pytest", "--collect-only"])
