"""Runbooks (issue 31): sections parsed and cited, searched with BM25, a team's folder and URLs
re-read when they change, linked to the digest, and cited in answers through the whole bot."""

from __future__ import annotations

import http.server
import threading
from pathlib import Path

import pytest
from waiting import wait_until

from agent.digest import build_digest
from agent.digest.runbook_links import runbook_links
from bot.settings import Settings
from infra.runbooks.index import RunbookIndex
from infra.runbooks.library import RunbookLibrary
from infra.runbooks.sections import parse_runbook, slug
from infra.sandbox.vllm import LatencyModel, VllmEmulator

ALICE = "UALICE"
TEAM_RUNBOOK = """# Payments service

## Ledger writer stuck on a lock
**Symptoms**
- `ledger-writer: waiting for advisory lock \\d+` — the writer logs this every second
- `deadlock detected while flushing ledger`

**Cause**
A batch job holds the ledger's advisory lock after a failed deploy.

**Fix**
1. Find the holder with `SELECT pid FROM pg_locks WHERE locktype = 'advisory'`.
2. Restart the batch job; the writer resumes on its own.

**Sources**
- https://www.postgresql.org/docs/current/explicit-locking.html
"""
LOGS = "\n".join(
    [f"2026-11-03T10:00:{i:02d}Z INFO api: request {i} ok in {20 + i} ms" for i in range(1, 12)]
    + ["2026-11-03T10:00:12Z ERROR ledger-writer: waiting for advisory lock 4242",
       "2026-11-03T10:00:13Z ERROR ledger-writer: waiting for advisory lock 4242"]
    + [f"2026-11-03T10:00:{i:02d}Z INFO api: request {i} ok in {20 + i} ms" for i in range(14, 20)])
CITE = "RB:payments#ledger-writer-stuck-on-a-lock"


def team_folder(tmp_path: Path, text: str = TEAM_RUNBOOK) -> Path:
    folder = tmp_path / "runbooks"
    folder.mkdir(exist_ok=True)
    (folder / "payments.md").write_text(text, encoding="utf-8")
    return folder


# --- sections, search, links ----------------------------------------------------------------

def test_a_section_is_parsed_into_its_parts_and_cited_by_file_and_title():
    [section] = parse_runbook("payments", TEAM_RUNBOOK, "team").sections
    assert section.cite == CITE and section.file_title == "Payments service"
    assert len(section.patterns) == 2 and section.matches("ERROR ledger-writer: waiting for advisory lock 7")
    assert not section.matches("INFO ledger-writer: acquired advisory lock 7")
    assert section.cause.startswith("A batch job") and section.fix.startswith("1. Find the holder")
    assert section.sources == ("https://www.postgresql.org/docs/current/explicit-locking.html",)
    assert slug("HBM out of memory (after compile)!") == "hbm-out-of-memory-after-compile"


def test_a_bad_symptom_pattern_is_reported_and_the_section_keeps_its_other_patterns():
    parsed = parse_runbook("x", "## Broken\n**Symptoms**\n- `unclosed (group` \n- `fine pattern`\n**Fix**\n1. a\n",
                           "team/x.md")
    [section] = parsed.sections
    assert [p.pattern for p in section.patterns] == ["fine pattern"]
    assert parsed.problems and "unclosed (group" in parsed.problems[0] and "not a regular expression" in parsed.problems[0]


def test_search_ranks_the_section_that_names_the_error_first():
    other = "# Other\n\n## Disk full\n**Symptoms**\n- `No space left on device`\n**Cause**\nThe disk filled.\n" \
            "**Fix**\n1. Free space; a lock file may be stale.\n"
    sections = parse_runbook("payments", TEAM_RUNBOOK, "t").sections + parse_runbook("disk", other, "t").sections
    index = RunbookIndex(sections)
    assert [hit.section.cite for hit in index.search("advisory lock waiting")][0] == CITE
    assert index.search("no space left")[0].section.cite == "RB:disk#disk-full"
    assert isinstance(index.search('") OR (" -- ; DROP NEAR(x'), list)  # FTS5's syntax never reaches it
    assert index.search("the of and") == []


def test_a_digest_links_the_runbook_its_lines_match():
    index = RunbookIndex(parse_runbook("payments", TEAM_RUNBOOK, "t").sections)
    digest = build_digest(LOGS.splitlines(), budget_tokens=800)
    [link] = runbook_links(digest, index)
    assert link.cite == CITE and set(link.lines) <= {12, 13} and link.lines
    assert link.first_fix().startswith("Find the holder")


@pytest.mark.parametrize("budget", [200, 700, 1800])
def test_a_digest_and_its_runbook_links_stay_within_the_budget_together(budget):
    from agent.digest.runbook_links import digest_with_runbooks
    from agent.digest.tokens import estimate_tokens

    index = RunbookIndex(parse_runbook("payments", TEAM_RUNBOOK, "team").sections)
    digest, links, text = digest_with_runbooks(LOGS.splitlines(), budget, index)
    assert digest.tokens + (estimate_tokens(text) if links else 0) <= budget
    if budget >= 1800:
        assert [link.cite for link in links] == [CITE]  # room for it: the link is kept


# --- where runbooks come from -----------------------------------------------------------------

def test_a_team_folder_is_searched_with_the_built_in_ones_and_re_read_when_a_file_changes(tmp_path):
    folder = team_folder(tmp_path)
    library = RunbookLibrary.from_settings(str(folder))
    assert library.index().search("advisory lock")[0].section.cite == CITE
    first = library.index()
    assert library.index() is first  # nothing changed: not re-read
    (folder / "payments.md").write_text(TEAM_RUNBOOK.replace("Ledger writer stuck on a lock", "Ledger writer wedged"),
                                        encoding="utf-8")
    cites = [hit.section.cite for hit in library.index().search("advisory lock")]
    assert "RB:payments#ledger-writer-wedged" in cites and CITE not in cites
    (folder / "payments.md").unlink()
    assert all(hit.section.stem != "payments" for hit in library.index().search("advisory lock"))


class _RunbookServer(http.server.BaseHTTPRequestHandler):
    body = TEAM_RUNBOOK.encode()
    etag = '"v1"'
    fail = False
    seen: list[str] = []
    hold: threading.Event | None = None  # set: answers wait for it (a slow server)

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        type(self).seen.append(self.headers.get("If-None-Match", ""))
        if type(self).hold is not None:
            type(self).hold.wait(30)
        if type(self).fail:
            self.send_response(503)
            self.end_headers()
        elif self.headers.get("If-None-Match") == type(self).etag:
            self.send_response(304)
            self.end_headers()
        else:
            self.send_response(200)
            self.send_header("ETag", type(self).etag)
            self.send_header("Content-Length", str(len(type(self).body)))
            self.end_headers()
            self.wfile.write(type(self).body)

    def log_message(self, *args) -> None:
        return None


@pytest.fixture
def runbook_server():
    _RunbookServer.seen = []
    _RunbookServer.fail = False
    _RunbookServer.hold = None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _RunbookServer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/runbooks/payments.md"
    server.shutdown()
    server.server_close()


def test_a_runbook_url_is_fetched_revalidated_with_its_etag_and_kept_when_a_fetch_fails(runbook_server):
    library = RunbookLibrary(folders=[], urls=[runbook_server], url_refresh_seconds=0)
    assert library.index().search("advisory lock")[0].section.cite == CITE
    assert library.index().search("advisory lock")[0].section.origin == runbook_server
    assert _RunbookServer.seen[-1] == '"v1"'  # the second read asked "changed since v1?"
    _RunbookServer.fail = True
    assert library.index().search("advisory lock")[0].section.cite == CITE  # the last copy stays
    assert any("keeping the last copy" in problem for problem in library.problems)


def test_a_slow_runbook_server_holds_up_only_the_caller_that_fetches(runbook_server):
    library = RunbookLibrary(folders=[], urls=[runbook_server], url_refresh_seconds=0)
    assert library.index().search("advisory lock")  # the first copy
    _RunbookServer.hold = release = threading.Event()
    fetching = threading.Thread(target=library.index)
    fetching.start()
    try:
        wait_until(lambda: len(_RunbookServer.seen) == 2, timeout=10, what="the second fetch to reach the server")
        # Meanwhile another mention's index is served from the last copy, not queued behind the fetch.
        assert library.index().search("advisory lock")[0].section.cite == CITE
        assert fetching.is_alive() and not release.is_set()
    finally:
        release.set()
        fetching.join(30)


def test_a_runbook_urls_token_and_credentials_are_never_shown(runbook_server, caplog):
    secret_url = runbook_server.replace("http://", "http://ci:hunter2@") + "?token=ghp_s3cr3tvalue"
    library = RunbookLibrary(folders=[], urls=[secret_url], url_refresh_seconds=0)
    [hit] = library.index().search("advisory lock")[:1]
    assert hit.section.origin == runbook_server  # what the model, MCP and the Slack card are given
    _RunbookServer.fail = True
    with caplog.at_level("WARNING"):
        library.index()
    # Ours: the problems and tpubot's own log lines (httpx's request lines are silenced by
    # bot/logging_setup.py, test_logging_context holds that).
    said = " ".join(library.problems) + " ".join(r.getMessage() for r in caplog.records if r.name.startswith("infra"))
    assert "could not fetch" in said or "keeping the last copy" in said
    assert "ghp_s3cr3tvalue" not in said and "hunter2" not in said


def test_a_bad_runbooks_setting_names_the_variable_and_the_fix(tmp_path):
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="RUNBOOKS_DIR=.* is not a folder"):
        Settings.load(tmp_path / "none.env", runbooks_dir=str(tmp_path / "missing"))
    with pytest.raises(ValidationError, match="RUNBOOKS_URLS: 'ftp://x/y.md' is not an http"):
        Settings.load(tmp_path / "none.env", runbooks_urls="ftp://x/y.md")


# --- through the bot (in-process) ----------------------------------------------------------------------

def _bot(make_bot, tmp_path, **overrides):
    return make_bot(poll_interval="0.2s", runbooks_dir=str(team_folder(tmp_path)), **overrides)


def _answer(stack, channel: str) -> str:
    def done():
        return next((m.text for m in stack.slack.channel_messages(channel) if not m.streaming
                     and ("_Answered by" in m.text or "_Made without the model" in m.text)), None)

    wait_until(done, timeout=60, what="the answer")
    return done()


def test_without_a_model_the_answer_names_the_team_runbook_its_logs_match_and_its_fix(make_bot, tmp_path):
    bot = _bot(make_bot, tmp_path)
    bot.mention(f"<@UTPUBOT> what is wrong here?\n{LOGS}", user=ALICE, channel="C0RB1")
    text = _answer(bot, "C0RB1")
    assert f"This looks like *Ledger writer stuck on a lock*, see {CITE}" in text
    assert "L12" in text and "Fix: Find the holder" in text


def test_the_sandbox_model_cites_the_runbook_from_its_tool_result(make_bot, tmp_path):
    with VllmEmulator(latency=LatencyModel.instant()) as emu:
        bot = _bot(make_bot, tmp_path, gemma_base_url=emu.base_url)
        bot.mention(f"<@UTPUBOT> summarize these logs\n{LOGS}", user=ALICE, channel="C0RB2")
        text = _answer(bot, "C0RB2")
        prompts = str([request["messages"] for request in emu.requests])
    assert "heuristic stand-in" in text and f"see {CITE}" in text and "Find the holder" in text
    assert "runbook sections whose symptoms match these logs" in prompts  # the first turn carries it too


def test_tpu_runbook_finds_a_section_added_to_the_team_folder_without_a_restart(make_bot, tmp_path):
    slack = _bot(make_bot, tmp_path).signed_requests()
    reply = slack.slash("runbook advisory lock", user=ALICE, channel="C0RB3").json()
    assert CITE in str(reply["blocks"]) and "from payments.md" in str(reply["blocks"])
    (tmp_path / "runbooks" / "search.md").write_text(
        "# Search\n\n## Index rebuild loops\n**Symptoms**\n- `reindex started again`\n**Cause**\nA bad mapping."
        "\n**Fix**\n1. Roll back the mapping.\n**Sources**\n- https://example.org/search\n", encoding="utf-8")
    reply = slack.slash("runbook reindex loops", user=ALICE, channel="C0RB3").json()
    assert "RB:search#index-rebuild-loops" in str(reply["blocks"]) and "Roll back the mapping" in str(reply["blocks"])
    empty = slack.slash("runbook", user=ALICE, channel="C0RB3").json()
    assert "needs words to look for" in empty["text"] and "/tpu runbook RESOURCE_EXHAUSTED" in empty["text"]


# --- the built-in runbooks, through the bot ---------------------------------------------

def _shipped(incident_id: str):
    from agent.evals.cases import load_incidents, shipped_dir

    return next(i for i in load_incidents([shipped_dir()]) if i.id == incident_id)


@pytest.mark.parametrize("incident_id, cite", [
    ("vllm-startup-shared-kv-old-image", "RB:vllm-tpu#image-too-old-for-gemma-4-e2b-shared-kv-layers"),
    ("vllm-mm-batched-tokens", "RB:vllm-tpu#max-num-batched-tokens-below-a-multimodal-item"),
])
def test_a_vllm_start_up_failure_is_answered_with_its_built_in_runbook_and_fix(make_bot, incident_id, cite):
    incident = _shipped(incident_id)
    logs = "\n".join(incident.logs)
    section = RunbookLibrary.from_settings().index().by_cite(cite)
    assert section is not None and incident.runbooks[0] == cite
    first_fix_words = " ".join(section.fix.splitlines()[0].lstrip("0123456789.) ").split()[:4])
    bot = make_bot(poll_interval="0.2s")  # no model: the model-less answer
    bot.mention(f"<@UTPUBOT> {incident.mention}\n{logs}", user=ALICE, channel="C0RB4")
    modelless = _answer(bot, "C0RB4")
    with VllmEmulator(latency=LatencyModel.instant()) as emu:
        bot = make_bot(poll_interval="0.2s", gemma_base_url=emu.base_url)
        bot.mention(f"<@UTPUBOT> summarize these logs: {incident.mention}\n{logs}", user=ALICE, channel="C0RB5")
        sandbox = _answer(bot, "C0RB5")
    for text in (modelless, sandbox):
        assert f"see {cite}" in text and f"Fix: {first_fix_words}" in text, text
    assert "heuristic stand-in" in sandbox and "_Made without the model" in modelless
