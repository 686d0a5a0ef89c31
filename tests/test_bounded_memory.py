"""Big logs are read once, in bounded memory: the Python heap does not grow with the input.

Measured with tracemalloc (the traced peak above what was allocated before the read), through
the real clients: an 8 MiB attachment, plain and gzip, from the Slack stand-in over slack_sdk and
requests, into a mention's material and digested three times (prompt, model-less summary,
summarize_logs with a filter); a local file through summarize_logs `path`; Cloud Logging pages
from the logging emulator through the google-cloud-logging client, via query_cloud_logs. The
Slack and Cloud Logging figures are set against the same input held whole (the old way), so the
instrument is shown to see a buffered copy. The spools' files are gone when the job ends, also
when it fails or is cancelled.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import gzip
import random
import subprocess
import sys
import tempfile
import tracemalloc
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import pytest
from slack_sdk import WebClient
from slack_sdk.web.async_client import AsyncWebClient

from agent.access import AccessPolicy
from agent.actions import run_action
from agent.actions.run_context import RunContext
from agent.context import Actor
from agent.digest import build_digest, lines_from_bytes, lines_from_entries
from agent.llm.modelless import summarize
from agent.llm.prompt import user_message
from bot.settings import Settings
from bot.wiring import build_services
from handlers.mention_job import MentionJob, answer_mention, gather_input
from handlers.thread_reply import STATUS_TEXT
from infra.cloud_logging import CloudLoggingConfig, query_cloud_logs
from infra.jobs import JobOutcome
from infra.local_files import LocalFiles
from infra.sandbox.slack_api import InjectedError, SlackApiSandbox
from infra.slack_files import MAX_LOG_FILE_BYTES, download_slack_file
from open_files import needs_proc, open_files_under
from waiting import wait_for

MiB = 1024 * 1024
ROOT = Path(__file__).resolve().parent.parent
BOT_USER = "UTPUBOT"
ALICE = Actor(user_id="UALICE", team="T0SANDBOX", channel="C0MEM")
PASTE = ["2026-02-01 09:00:00,001 INFO [main] pasted line one", "2026-02-01 09:00:01,002 INFO [main] pasted two",
         "2026-02-01 09:00:02,003 WARN [main] pasted three"]
MENTION_TEXT = "<@UTPUBOT> what broke?\n```\n" + "\n".join(PASTE) + "\n```"
PLANTED_AT = 54_321  # the file's only ERROR line
PLANTED = "2026-02-01 11:22:33,444 ERROR [ckpt] storage: disk quota exceeded on /mnt/ckpt (wrote 0 of 4096 bytes)"
TEMPLATES = (
    "INFO [worker-{w}] step {n} loss={loss:.4f} tokens/s={tps}",
    "INFO [worker-{w}] checkpoint shard {s} of 64 written to gs://bucket/run-7/step_{n}",
    "DEBUG [rpc] heartbeat from tpu-v5e-{w} in {ms} ms",
    "WARN [host] slow host-to-device transfer: {ms} ms on worker {w}",
    "INFO [data] prefetch queue depth {s} (target 32), batch {n}",
)


def big_log(size: int, *, crlf: bool = False) -> bytes:
    """About `size` bytes of a training log: a few kinds of line with changing numbers, one ERROR."""
    rng = random.Random(size)
    end = "\r\n" if crlf else "\n"
    lines: list[str] = []
    total = 0
    while total < size:
        n = len(lines) + 1
        if n == PLANTED_AT:
            line = PLANTED
        else:
            template = TEMPLATES[rng.randrange(len(TEMPLATES))]
            line = f"2026-02-01 10:{n // 60 % 60:02d}:{n % 60:02d},{n % 1000:03d} " + template.format(
                w=rng.randrange(8), n=n, loss=rng.random() * 3, tps=rng.randrange(1000, 9000), s=rng.randrange(64),
                ms=rng.randrange(5, 900))
        lines.append(line)
        total += len(line) + len(end)
    return (end.join(lines) + end).encode()


@contextmanager
def traced() -> Iterator[Callable[[], int]]:
    """The traced heap's peak above what it held on entry; call the yielded function to read it."""
    gc.collect()  # garbage of an earlier step is not this step's peak
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        peak: list[int] = []
        yield lambda: peak[0] if peak else tracemalloc.get_traced_memory()[1] - before
        peak.append(tracemalloc.get_traced_memory()[1] - before)
    finally:
        tracemalloc.stop()


@pytest.fixture
def slack_api() -> Iterator[SlackApiSandbox]:
    sandbox = SlackApiSandbox()
    sandbox.start()
    try:
        yield sandbox
    finally:
        sandbox.stop()


@pytest.fixture
def spool_dir(tmp_path, monkeypatch) -> Path:
    """Where this test's spools go: their temporary files are made under it."""
    directory = tmp_path / "spools"
    directory.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(directory))
    return directory


@pytest.fixture
async def services(redis_url, tmp_path):
    config = Settings.load(tmp_path / "none.env", redis_url=redis_url)
    built, redis, pool = await build_services(config, redis_url=redis_url)
    try:
        yield built
    finally:
        await pool.aclose()
        await redis.aclose()


# --- Slack attachments -------------------------------------------------------------------------


@needs_proc
@pytest.mark.parametrize("compressed", [False, True], ids=["plain", "gzip"])
async def test_an_8_mib_attachment_is_read_and_digested_in_bounded_memory(slack_api, services, spool_dir, compressed):
    log = big_log(8 * MiB)
    lines = log.count(b"\n")
    body = gzip.compress(log) if compressed else log
    info = slack_api.add_file("F0BIG", "train.log.gz" if compressed else "train.log", body,
                          "application/gzip" if compressed else "text/plain")
    client = AsyncWebClient(token=slack_api.token, base_url=slack_api.base_url)

    with traced() as peak:
        mention = await gather_input(client, channel="C0MEM", ts="1.000100", thread_ts="1.000100",
                                     text=MENTION_TEXT, files=[info], bot_user_id=BOT_USER)
        with mention:
            assert len(open_files_under(spool_dir)) == 1  # the file's lines are on disk, not in the heap
            prompt, _ = user_message(mention, user_id=ALICE.user_id)
            summary, _ = summarize(mention)
            run = RunContext(ALICE, services.redactor, mention)
            filtered = await run_action("summarize_logs", services, run, {"contains": "quota"})
    print(f"\n{'gzip' if compressed else 'plain'} attachment of {len(log) / MiB:.1f} MiB, {lines:,} lines: "
          f"traced peak {peak() / MiB:.2f} MiB")
    assert open_files_under(spool_dir) == []
    assert peak() < 2 * MiB < len(log) / 4

    # The material is the file, numbered after the paste, and every digest saw all of it.
    name = "train.log.gz" if compressed else "train.log"
    line_map = f"L1-L3 pasted text; L4-L{lines + 3} file {name}"
    assert mention.line_map() == line_map and mention.notes == ()
    assert f"log digest; {line_map}" in prompt
    assert summary.startswith(f"*Log summary*: {lines + 3:,} lines") and "disk quota exceeded" in summary
    assert f"first at L{PLANTED_AT + 3}" in summary
    assert filtered.ok and filtered.data["total_lines"] == lines + 3
    assert PLANTED_AT + 3 in filtered.data["cited_lines"] and "disk quota exceeded" in filtered.text


def test_the_measure_sees_a_whole_download(slack_api):
    # The same file, downloaded whole and split into a list (how mentions read files before):
    # the heap holds the file, so the bound above is not an artefact of the instrument.
    log = big_log(8 * MiB)
    slack_api.add_file("F0BIG", "train.log", log)
    client = WebClient(token=slack_api.token, base_url=slack_api.base_url)
    with traced() as peak:
        digest = build_digest(lines_from_bytes(download_slack_file(client, "F0BIG").data))
    print(f"\nwhole download and line list of {len(log) / MiB:.1f} MiB: traced peak {peak() / MiB:.2f} MiB")
    assert digest.total_lines == log.count(b"\n")
    assert peak() > len(log)


@contextmanager
def no_file_left_to_the_collector() -> Iterator[None]:
    """Fails when a file object is collected unclosed inside the block (Python's ResourceWarning):
    a spool nobody closed would vanish at the same moment, so only this tells the two apart."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        yield
        gc.collect()
    unclosed = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
    assert [text for text in unclosed if text.startswith("unclosed file")] == []  # (aiohttp's sockets are not ours)


def spools_at_each_call(slack_api: SlackApiSandbox, spool_dir: Path) -> list[tuple[str, int]]:
    """(Web API method, spools open while Slack answered it), for every call from now on."""
    seen: list[tuple[str, int]] = []
    slack_api.on_event(lambda method, result: seen.append((method, len(open_files_under(spool_dir)))))
    return seen


@needs_proc
async def test_the_job_closes_the_spools_when_it_ends(slack_api, services, spool_dir):
    log = big_log(200_000)
    info = slack_api.add_file("F0LOG", "train.log", log)
    client = AsyncWebClient(token=slack_api.token, base_url=slack_api.base_url)
    seen = spools_at_each_call(slack_api, spool_dir)
    with no_file_left_to_the_collector():
        outcome = await answer_mention(services, client, MentionJob(
            team=ALICE.team, channel="C0JOB", ts="2.000100", thread_ts="2.000100", user=ALICE.user_id,
            text=MENTION_TEXT, files=[info], bot_user_id=BOT_USER))
    assert outcome == JobOutcome.ok("no-model")
    lines = log.count(b"\n") + 3
    assert slack_api.channel_messages("C0JOB")[0].text.startswith(
        f"*Log summary*: {lines:,} lines, 8 kinds of message, no errors in those (L1-L3 pasted text; L4-L{lines} file train.log)")
    # open until the answer is written (the 👍/👎 buttons are posted after it)…
    assert ("files.info", 1) in seen and ("chat.update", 1) in seen
    assert open_files_under(spool_dir) == []  # …and gone with the job


@needs_proc
async def test_a_failing_job_closes_the_spools_too(slack_api, services, spool_dir):
    info = slack_api.add_file("F0LOG", "train.log", big_log(200_000))
    client = AsyncWebClient(token=slack_api.token, base_url=slack_api.base_url)
    seen = spools_at_each_call(slack_api, spool_dir)

    def break_the_card(method: str, result: dict) -> None:
        if method == "chat.postMessage" and result.get("message", {}).get("text") == STATUS_TEXT:
            # the status line is up: the next post (the proposal card) fails
            slack_api.inject_error("chat.postMessage", InjectedError(body={"ok": False, "error": "internal_error"}))

    slack_api.on_event(break_the_card)
    with no_file_left_to_the_collector():
        outcome = await answer_mention(services, client, MentionJob(
            team=ALICE.team, channel="C0FAIL", ts="3.000100", thread_ts="3.000100", user=ALICE.user_id,
            text=MENTION_TEXT, files=[info], bot_user_id=BOT_USER))
    assert outcome == JobOutcome.failed()
    assert "Something went wrong" in slack_api.channel_messages("C0FAIL")[0].text
    assert seen[-1] == ("chat.update", 1)  # the failure was reported with the spool still open
    assert open_files_under(spool_dir) == []


@needs_proc
async def test_a_cancelled_gathering_leaves_no_spool(slack_api, spool_dir):
    small = slack_api.add_file("F0ONE", "one.log", big_log(50_000))
    second = slack_api.add_file("F0TWO", "two.log", big_log(50_000))
    client = AsyncWebClient(token=slack_api.token, base_url=slack_api.base_url)
    held: list = []

    def hold_after_the_first_file(method: str, result: dict) -> None:
        if method == "files.info" and result.get("file", {}).get("id") == "F0ONE":
            held.append(slack_api.hold())  # the second file's files.info waits: a slow Slack

    slack_api.on_event(hold_after_the_first_file)
    task = asyncio.create_task(gather_input(client, channel="C0CAN", ts="4.000100", thread_ts="4.000100",
                                            text=MENTION_TEXT, files=[small, second], bot_user_id=BOT_USER))
    try:
        # Two spools: the first file's, filled, and the second's, waiting for Slack.
        await wait_for(lambda: len(open_files_under(spool_dir)) == 2, timeout=30, what="two spools open")
        with no_file_left_to_the_collector():
            task.cancel()  # what an arq job timeout does
            with pytest.raises(asyncio.CancelledError):
                await task
        assert open_files_under(spool_dir) == []
    finally:
        held[0].set()
    # The download thread goes on to its closed spool and stops there; nothing reopens.
    await wait_for(lambda: len(slack_api.calls_to("files.info")) == 2, timeout=30, what="the held call answered")
    assert open_files_under(spool_dir) == []


@needs_proc
async def test_a_gzip_bomb_is_refused_while_it_streams_and_its_spool_is_dropped(slack_api, spool_dir):
    bomb = gzip.compress(b"2026-02-01 10:00:00,000 ERROR again and again\n" * (MAX_LOG_FILE_BYTES // 40))
    assert len(bomb) < MiB
    files = [slack_api.add_file("F0BOMB", "bomb.log.gz", bomb, "application/gzip"),
             slack_api.add_file("F0OK", "ok.log", "\n".join(PASTE).encode())]
    client = AsyncWebClient(token=slack_api.token, base_url=slack_api.base_url)
    with traced() as peak:
        mention = await gather_input(client, channel="C0BOMB", ts="5.000100", thread_ts="5.000100",
                                     text="<@UTPUBOT> look", files=files, bot_user_id=BOT_USER)
    print(f"\ngzip bomb refused after {MAX_LOG_FILE_BYTES / MiB:.0f} MiB of output: traced peak {peak() / MiB:.2f} MiB")
    with mention:
        assert mention.notes == (f"Could not read bomb.log.gz: bomb.log.gz expands beyond the "
                                 f"{MAX_LOG_FILE_BYTES:,}-byte limit",)
        assert mention.line_map() == "L1-L3 file ok.log"
        assert len(open_files_under(spool_dir)) == 1
    assert open_files_under(spool_dir) == []
    assert peak() < 2 * MiB


# --- a local file (summarize_logs `path`, tpubot mcp) ----------------------------------------------


@needs_proc
@pytest.mark.parametrize("compressed", [False, True], ids=["plain", "gzip"])
async def test_a_local_file_is_digested_in_bounded_memory(services, spool_dir, tmp_path, compressed):
    root = tmp_path / "project"
    (root / "logs").mkdir(parents=True)
    log = big_log(8 * MiB, crlf=True)
    lines = log.count(b"\n")
    name = "logs/train.log.gz" if compressed else "logs/train.log"
    (root / name).write_bytes(gzip.compress(log) if compressed else log)
    svc = dataclasses.replace(services, local_files=LocalFiles(root))
    with traced() as peak:
        result = await run_action("summarize_logs", svc, ALICE, {"path": name})
    print(f"\nlocal {'gzip ' if compressed else ''}file of {len(log) / MiB:.1f} MiB: traced peak {peak() / MiB:.2f} MiB")
    assert result.ok and result.text.startswith(f"Sources: L1-L{lines} file {name}\n")
    assert f"L{PLANTED_AT} | {PLANTED}" in result.text  # \r\n ends gone, numbering intact
    assert open_files_under(spool_dir) == []
    assert peak() < 2 * MiB


# --- Cloud Logging ---------------------------------------------------------------------------------

LOGGING_PROJECT = "memory-project"
ENTRIES = 5_000
# The emulator runs in its own process, so the heap measured is the reader's alone.
EMULATOR = f"""
import sys
from datetime import datetime, timedelta, timezone
from infra.sandbox.logging_api import LoggingEmulator, generate_entries

entries = generate_entries({LOGGING_PROJECT!r}, {ENTRIES}, end=datetime.now(timezone.utc), span=timedelta(minutes=50))
stack = " | " + " ".join(f"at frame_{{i}}(runtime/module.py)" for i in range(32))  # ~1 kB an entry
for entry in entries:
    if "textPayload" in entry:
        entry["textPayload"] += stack
    else:
        entry["jsonPayload"]["message"] += stack
for entry, marker in ((entries[0], "OLDEST"), (entries[-1], "NEWEST")):
    entry.pop("jsonPayload", None)
    entry.update(severity="CRITICAL", textPayload=f"{{marker}} entry of the window: scheduler restarted")
with LoggingEmulator({LOGGING_PROJECT!r}, entries) as server:
    print(server.url, flush=True)
    sys.stdin.read()  # until the test closes stdin
"""


@pytest.fixture(scope="module")
def logging_url() -> Iterator[str]:
    emulator = subprocess.Popen([sys.executable, "-c", EMULATOR], cwd=ROOT, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
    try:
        url = emulator.stdout.readline().strip()
        assert url.startswith("http://"), "the logging emulator did not start"
        yield url
    finally:
        emulator.stdin.close()
        emulator.wait(timeout=30)


@needs_proc
async def test_cloud_logging_pages_are_digested_in_memory_that_does_not_grow_with_them(services, spool_dir,
                                                                                       logging_url):
    # An admin reading the whole project: the generated entries belong to no lease of this test.
    svc = dataclasses.replace(services, cloud_logs=CloudLoggingConfig(project=LOGGING_PROJECT,
                                                                      api_endpoint=logging_url, anonymous=True),
                              access=AccessPolicy(admins=frozenset({ALICE.user_id})))
    args = {"min_severity": "DEBUG", "hours": 2, "scope": "project"}
    assert (await run_action("query_cloud_logs", svc, ALICE, {**args, "max_entries": 10})).ok  # imports, client set-up
    peaks = {}
    for entries in (1_000, 2_000, ENTRIES):  # pages of 1,000: one, two, five
        with traced() as peak:
            result = await run_action("query_cloud_logs", svc, ALICE, {**args, "max_entries": entries})
        peaks[entries] = peak()
        assert result.ok and result.data["total_lines"] == entries, result.text
        assert open_files_under(spool_dir) == []
    # Oldest first, as before: the oldest entry of the window is L1 and the newest the last line.
    oldest = next(line for line in result.text.splitlines() if line.strip().startswith("L1 | "))
    newest = next(line for line in result.text.splitlines() if line.strip().startswith(f"L{ENTRIES} | "))
    assert "OLDEST entry" in oldest and "NEWEST entry" in newest
    assert result.text.startswith(f"{ENTRIES} Cloud Logging entries, DEBUG+ in the last 2h")

    # The same five pages held as entry objects (how query_cloud_logs read them before).
    config = svc.cloud_logs
    with traced() as whole:
        held = query_cloud_logs(config, min_severity="DEBUG", since=timedelta(hours=2), max_entries=ENTRIES)
        build_digest(list(lines_from_entries(held.entries)))
    print(f"\nCloud Logging, traced peak: 1 page {peaks[1_000] / MiB:.2f} MiB, 2 pages {peaks[2_000] / MiB:.2f} MiB, "
          f"5 pages {peaks[ENTRIES] / MiB:.2f} MiB; 5 pages held as entries {whole() / MiB:.2f} MiB")
    assert len(held.entries) == ENTRIES
    # At most two pages at once (the client's iterator keeps a page until the next one arrived),
    # however many pages are read; held whole, the entries pile up.
    assert peaks[ENTRIES] < 1.1 * peaks[2_000]
    assert peaks[ENTRIES] < whole() / 2
