"""The suite runs in parallel (pytest-xdist, configured in pyproject.toml) without two tests ever
sharing a Redis database: what the README's test command does, and what keeps it honest."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from conftest import TEST_DATABASES, pytest_xdist_auto_num_workers, worker_databases

ROOT = Path(__file__).resolve().parent.parent


def test_the_readme_command_runs_whole_files_on_parallel_workers():
    options = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["pytest"]["ini_options"]
    addopts = options["addopts"]
    assert addopts[addopts.index("-n") + 1] == "auto"
    # loadfile: a module-scoped fixture (tests/test_hostile_input.py's stack on its own database) is
    # set up in one process, and that file's tests run there in file order.
    assert addopts[addopts.index("--dist") + 1] == "loadfile"
    assert "--no-loadscope-reorder" in addopts  # files in collection order, the long ones spread out


def test_auto_starts_one_worker_more_than_there_are_cores(monkeypatch):
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert pytest_xdist_auto_num_workers(None) == 3
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(64)), raising=False)
    assert pytest_xdist_auto_num_workers(None) == len(TEST_DATABASES)  # one database each at most


@pytest.mark.parametrize("count", range(1, len(TEST_DATABASES) + 1))
def test_workers_on_one_shared_server_never_share_a_database(count):
    slices = [worker_databases(shared=True, worker=f"gw{i}", count=count) for i in range(count)]
    assert all(slices)
    assert sorted(db for databases in slices for db in databases) == list(TEST_DATABASES)
    assert not {14, 15} & set(TEST_DATABASES)  # the module-scoped stacks' own


def test_a_worker_with_its_own_server_or_no_xdist_takes_every_database():
    assert worker_databases(shared=False, worker="gw1", count=3) == list(TEST_DATABASES)
    assert worker_databases(shared=True, worker="", count=1) == list(TEST_DATABASES)


def test_more_workers_than_databases_on_a_shared_server_is_one_line_saying_what_to_do():
    with pytest.raises(pytest.fail.Exception, match=r"REDIS_URL is set: .* run with -n 13 or fewer, or unset REDIS_URL"):
        worker_databases(shared=True, worker="gw0", count=14)


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
