"""query_cloud_logs with the real google-cloud-logging client (HTTP) against the local emulator."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from google.api_core.exceptions import TooManyRequests

from agent.digest import build_digest, lines_from_entries
from infra.cloud_logging import CloudLoggingConfig, build_filter, make_client, query_cloud_logs
from infra.sandbox.logging_api import LoggingEmulator, generate_entries, parse_timestamp

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
PROJECT = "sandbox-project"


@pytest.fixture
def emulator():
    with LoggingEmulator(PROJECT, generate_entries(PROJECT, 1_200, end=NOW, span=timedelta(hours=6))) as server:
        yield server


@pytest.fixture
def client(emulator):
    return make_client(CloudLoggingConfig(project=PROJECT, api_endpoint=emulator.url, anonymous=True))


def _severity_at_least(entry: dict, name: str) -> bool:
    order = ["DEFAULT", "DEBUG", "INFO", "NOTICE", "WARNING", "ERROR", "CRITICAL", "ALERT", "EMERGENCY"]
    return order.index(entry["severity"]) >= order.index(name)


def test_filter_always_names_timestamp_so_the_client_adds_no_24h_clause(emulator, client):
    result = query_cloud_logs(client, now=lambda: NOW)
    sent = emulator.requests[0]["filter"]
    assert sent == result.filter  # nothing appended by the client
    assert sent.startswith('timestamp>="2026-03-01T11:00:00.000000Z"')
    assert 'severity>="WARNING"' in sent
    expected = [
        e for e in emulator.entries
        if _severity_at_least(e, "WARNING") and parse_timestamp(e["timestamp"]) >= NOW - timedelta(hours=1)
    ]  # fmt: skip
    assert len(result.entries) == len(expected) > 0
    assert [e.insert_id for e in result.entries] == [e["insertId"] for e in expected]  # oldest first
    assert not result.truncated


def test_a_window_older_than_24h_is_honoured():
    old_end = NOW - timedelta(days=3)
    entries = generate_entries(PROJECT, 100, end=old_end, span=timedelta(hours=2))
    with LoggingEmulator(PROJECT, entries) as server:
        client = make_client(CloudLoggingConfig(project=PROJECT, api_endpoint=server.url, anonymous=True))
        window_end = old_end + timedelta(seconds=1)  # the window is end-exclusive
        result = query_cloud_logs(client, min_severity=None, start=old_end - timedelta(hours=2), end=window_end)
    assert len(result.entries) == 100
    assert 'timestamp<"' in result.filter


def test_resource_labels_and_text_filters(emulator, client):
    result = query_cloud_logs(
        client,
        min_severity="ERROR",
        resource_type="tpu_worker",
        resource_labels={"worker_id": "2"},
        text_contains="DEADLINE_EXCEEDED",
        since=timedelta(hours=6),
        now=lambda: NOW,
    )
    assert result.entries
    for entry in result.entries:
        assert entry.resource.type == "tpu_worker"
        assert entry.resource.labels["worker_id"] == "2"
        text = entry.payload if isinstance(entry.payload, str) else entry.payload["message"]
        assert "DEADLINE_EXCEEDED" in text
    assert 'resource.labels.worker_id="2"' in result.filter


def test_paging_follows_tokens_up_to_the_cap(emulator, client):
    result = query_cloud_logs(client, min_severity=None, since=timedelta(hours=6), page_size=100, max_entries=450, now=lambda: NOW)
    assert len(result.entries) == 450
    assert result.truncated
    tokens = [request.get("pageToken") for request in emulator.requests]
    assert tokens == [None, "100", "200", "300", "400"]
    assert all(request["pageSize"] == 100 for request in emulator.requests)
    # the newest 450 of the window, returned oldest first
    newest = sorted(emulator.entries, key=lambda e: e["timestamp"])[-450:]
    assert [e.insert_id for e in result.entries] == [e["insertId"] for e in newest]


def test_429_backs_off_with_jitter_and_resumes_without_duplicates(emulator, client):
    # fail on the first request, then again in the middle of paging
    delays: list[float] = []
    emulator.fail_next(2)
    result = query_cloud_logs(
        client, min_severity=None, since=timedelta(hours=6), page_size=200, max_entries=700,
        base_delay=0.01, sleep=delays.append, now=lambda: NOW,
    )  # fmt: skip
    assert result.retries == 2
    assert len(delays) == 2
    assert 0.005 <= delays[0] <= 0.01 and 0.01 <= delays[1] <= 0.02  # exponential, jittered
    assert len(result.entries) == 700
    assert len({e.insert_id for e in result.entries}) == 700

    emulator.requests.clear()
    delays.clear()
    # fail after two pages were read: the retry narrows the window to what is left
    emulator.fail_next(1, after=2)
    result = query_cloud_logs(
        client, min_severity=None, since=timedelta(hours=6), page_size=200, max_entries=700,
        base_delay=0.01, sleep=delays.append, now=lambda: NOW,
    )  # fmt: skip
    assert result.retries == 1
    assert len({e.insert_id for e in result.entries}) == len(result.entries) == 700
    resumed = [r["filter"] for r in emulator.requests if "timestamp<=" in r["filter"]]
    assert resumed and resumed[0].count("timestamp<=") == 1
    newest = sorted(emulator.entries, key=lambda e: e["timestamp"])[-700:]
    assert [e.insert_id for e in result.entries] == [e["insertId"] for e in newest]


def test_persistent_429_gives_up_after_bounded_retries(emulator, client):
    emulator.fail_next(100)
    delays: list[float] = []
    with pytest.raises(TooManyRequests) as raised:
        query_cloud_logs(client, max_retries=3, base_delay=0.01, sleep=delays.append, now=lambda: NOW)
    assert len(delays) == 3
    assert "Quota exceeded" in str(raised.value)
    assert raised.value.reason == "RATE_LIMIT_EXCEEDED"


def test_entries_digest_end_to_end(emulator, client):
    result = query_cloud_logs(client, min_severity="WARNING", since=timedelta(hours=6), now=lambda: NOW)
    digest = build_digest(lines_from_entries(result.entries), budget_tokens=1_500)
    data = digest.to_json()
    assert data["total_lines"] == len(result.entries)
    assert data["templates"][0]["first_error"]  # the first error leads, then by severity
    assert data["templates"][1]["severity"] == "CRITICAL"
    assert any("DEADLINE_EXCEEDED" in t["template"] for t in data["templates"])


def test_build_filter_rejects_unknown_severity_and_quotes_text():
    with pytest.raises(ValueError):
        build_filter(start=NOW, min_severity="LOUD")
    text = build_filter(start=NOW, min_severity=None, text_contains='say "hi"')
    assert '(textPayload:"say \\"hi\\"" OR jsonPayload.message:"say \\"hi\\"")' in text
