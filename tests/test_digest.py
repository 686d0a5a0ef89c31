"""The log digest engine: header stripping, masking, mining, ranking, budget, citations."""

from __future__ import annotations

import json
import random

import pytest

from agent.digest import DEFAULT_BUDGET, build_digest, estimate_tokens, lines_from_bytes, lines_from_entries
from agent.digest.headers import split_header
from agent.digest.masking import mask
from digest_corpus import grouping_accuracy
from agent.digest.miner import TemplateMiner
from agent.digest.severity import CRITICAL, DEBUG, ERROR, INFO, WARNING

# --- header stripping ------------------------------------------------------------------------

HEADER_CASES = [
    # (raw line, expected message, expected severity, expected timestamp text)
    (
        "Jun 14 15:16:01 combo sshd(pam_unix)[19939]: check pass; user unknown",
        "check pass; user unknown",
        None,
        "Jun 14 15:16:01",
    ),
    (
        "2024-03-01T12:00:01.123Z ERROR [main] com.example.Server: connection refused by db-1",
        "connection refused by db-1",
        ERROR,
        "2024-03-01T12:00:01.123Z",
    ),
    (
        "081109 203615 148 INFO dfs.DataNode$PacketResponder: PacketResponder 1 for block blk_38865049064139660 terminating",
        "PacketResponder 1 for block blk_38865049064139660 terminating",
        INFO,
        "081109 203615",
    ),
    (
        "- 1117838570 2005.06.03 R02-M1-N0-C:J12-U11 2005-06-03-15.42.50.675872 R02-M1-N0-C:J12-U11 RAS KERNEL FATAL data TLB error interrupt",
        "data TLB error interrupt",
        CRITICAL,
        "1117838570 2005.06.03",
    ),
    (
        "03-17 16:13:38.811  1702  2395 D WindowManager: printFreezingDisplayLogsopening app wtoken",
        "printFreezingDisplayLogsopening app wtoken",
        DEBUG,
        "03-17 16:13:38.811",
    ),
    (
        "2016-09-28 04:30:30, Info                  CBS    Loaded Servicing Stack v6.1.7601.23505",
        "CBS    Loaded Servicing Stack v6.1.7601.23505",
        INFO,
        "2016-09-28 04:30:30",
    ),
    (
        "[Sun Dec 04 04:47:44 2005] [error] mod_jk child workerEnv in error state 6",
        "mod_jk child workerEnv in error state 6",
        ERROR,
        "Sun Dec 04 04:47:44 2005",
    ),
    (
        "2015-07-29 17:41:44,747 - WARN  [QuorumPeer[myid=1]/0:0:0:0:0:0:0:0:2181:FastLeaderElection@774] - Notification time out: 3200",
        "Notification time out: 3200",
        WARNING,
        "2015-07-29 17:41:44,747",
    ),
    ("20171223-22:15:29:606|Step_LSC|30002312|onStandStepChanged 3579", "onStandStepChanged 3579", None, "20171223-22:15:29:606"),
    (
        "[10.30 16:49:06] chrome.exe *64 - proxy.cse.cuhk.edu.hk:5070 open through proxy proxy.cse.cuhk.edu.hk:5070 HTTPS",
        "proxy.cse.cuhk.edu.hk:5070 open through proxy proxy.cse.cuhk.edu.hk:5070 HTTPS",
        None,
        "10.30 16:49:06",
    ),
    (
        '{"time": "2024-03-01T12:00:00Z", "level": "warning", "msg": "disk 91% full", "logger": "agent"}',
        "disk 91% full",
        WARNING,
        "2024-03-01T12:00:00Z",
    ),
    ("plain message without any header", "plain message without any header", None, None),
    # Issue 41: forms the TPU serving stack prints. vLLM's process prefix and its month-day clock:
    (
        "(EngineCore_DP0 pid=1241536) ERROR 11-07 06:32:56 [core.py:708] EngineCore failed to start.",
        "EngineCore failed to start.",
        ERROR,
        "11-07 06:32:56",
    ),
    (
        "(APIServer pid=1) INFO 11-21 06:20:43 [api_server.py:1612] vLLM API server version 0.32.0",
        "vLLM API server version 0.32.0",
        INFO,
        "11-21 06:20:43",
    ),
    # Python logging's default format (absl in tpu-inference#2771's log):
    (
        "WARNING:absl:Tensorflow library not found, tensorflow.io.gfile operations will use native shim calls.",
        "Tensorflow library not found, tensorflow.io.gfile operations will use native shim calls.",
        WARNING,
        None,
    ),
    # glog/absl (the PJRT TPU client, marin-community/marin#2387) and SkyPilot (skypilot#4579):
    (
        "E0118 22:42:45.737331   20084 tpu_pjrt_client.cc:1889] TpuClient::AllocateBuffer returning error",
        "TpuClient::AllocateBuffer returning error",
        ERROR,
        "22:42:45.737331",
    ),
    (
        "W 01-16 17:42:36 instance_utils.py:112] Got return code 8 in us-central1-a",
        "Got return code 8 in us-central1-a",
        WARNING,
        "01-16 17:42:36",
    ),
]


@pytest.mark.parametrize(("line", "message", "severity", "timestamp"), HEADER_CASES)
def test_header_is_stripped_without_configuration(line, message, severity, timestamp):
    parsed = split_header(line)
    assert parsed.message == message
    assert parsed.severity == severity
    assert parsed.timestamp == timestamp


def test_json_line_without_message_field_keeps_the_other_fields():
    parsed = split_header('{"severity": "ERROR", "event": "", "code": 503, "path": "/v1/chat"}')
    assert parsed.severity == ERROR
    assert '"code":503' in parsed.message and '"path":"/v1/chat"' in parsed.message


# --- masking and mining ------------------------------------------------------------------------


def test_masking_replaces_digit_runs_and_keeps_names():
    assert mask("ready=true,policy=3,wakefulness=1") == "ready=true,policy=<*>,wakefulness=<*>"
    assert mask("Received block blk_-1608999687919862906 of size 91178 from /10.250.10.6") == (
        "Received block <*> of size <*> from <*>"
    )
    assert mask("session opened for user root by (uid=0)") == "session opened for user root by (uid=<*>)"
    # one trailing digit on a word is a constant, not a variable
    assert mask("open through proxy SOCKS5 port 1080 ssh2") == "open through proxy SOCKS5 port <*> ssh2"
    assert mask("connection at Sun Jul 10 03:55:22 2005") == "connection at <*> <*> <*> <*> <*>"


def test_miner_merges_rare_word_variables_and_keeps_frequent_alternatives_apart():
    miner = TemplateMiner()
    lines = []
    users = ["webmaster", "test", "oracle", "admin", "guest", "pi", "ftp", "alice"]
    for index in range(400):
        lines.append(f"Invalid user {users[index % len(users)] if index % 3 else 'root'} from <*>")
        lines.append("VM Started (Lifecycle Event)" if index % 2 else "VM Paused (Lifecycle Event)")
    ids = [miner.add(line) for line in lines]
    mined = miner.templates()
    templates = {mined.templates[mined.cluster_of[i]] for i in ids}
    assert "Invalid user <*> from <*>" in templates
    assert {"VM Started (Lifecycle Event)", "VM Paused (Lifecycle Event)"} <= templates
    assert len(templates) == 3


def test_grouping_accuracy_definition():
    # group {0,1} is exact; predicted group {2,3} mixes two truth groups; line 4 is alone in both
    assert grouping_accuracy([1, 1, 2, 2, 3], ["a", "a", "b", "c", "d"]) == pytest.approx(3 / 5)
    assert grouping_accuracy([1, 2], ["a", "a"]) == 0.0


# --- ranking ---------------------------------------------------------------------------------


def _syslog(second: int, text: str, level: str = "INFO") -> str:
    return f"2024-03-01 12:{second // 60 % 60:02d}:{second % 60:02d},000 {level} [main] svc.Worker: {text}"


def test_single_error_outranks_ten_thousand_info_lines():
    lines = [_syslog(i, f"heartbeat {i} ok from worker-{i % 7}") for i in range(10_000)]
    lines.insert(6_123, _syslog(6_123, "checkpoint write failed: disk quota exceeded", "ERROR"))
    digest = build_digest(lines, budget_tokens=600)
    top = digest.templates[0]
    assert top.template == "checkpoint write failed: disk quota exceeded"
    assert top.severity == ERROR and top.count == 1
    assert top.exemplars[0].line == 6_124  # 1-based
    assert "L6124 |" in digest.render()


def test_blank_lines_add_no_template_and_keep_the_numbering():
    """Blank lines (a paste's gaps; the lines `contains` drops, blanked to keep the numbering) were a
    `DEFAULT x1999` template of nothing, citing a line that matched nothing."""
    lines = [_syslog(1, "rpc failed: DEADLINE_EXCEEDED", "ERROR"), "", "   \t", _syslog(4, "step 2 done"), "",
             _syslog(6, "rpc failed: DEADLINE_EXCEEDED", "ERROR")]
    digest = build_digest(lines)
    assert [t.template for t in digest.templates] == ["rpc failed: DEADLINE_EXCEEDED", "step <*> done"]
    assert digest.total_lines == 6 and digest.templates[0].last_line == 6 and digest.templates[1].first_line == 4
    rendered = digest.render()
    assert "DEFAULT" not in rendered and "6 lines, 2 templates" in rendered
    assert build_digest([_syslog(1, "disk full", "ERROR")]).render().startswith("Log digest: 1 line, 1 template ")
    assert not any(f"L{n} |" in rendered for n in (2, 3, 5))
    assert build_digest(["", " "]).templates == []


def test_first_error_before_a_cascade_is_kept_and_cited():
    lines = [_syslog(i, f"request {i} served in {i % 50} ms") for i in range(3_000)]
    lines.append(_syslog(3_000, "TPU runtime: HBM out of memory on chip 0", "ERROR"))
    for i in range(2_000):  # the cascade: many distinct, louder errors after the cause
        lines.append(_syslog(3_001 + i, f"rpc to worker-{i % 8} failed: channel {i % 3} closed by peer {chr(97 + i % 26)}x", "ERROR"))
        lines.append(_syslog(3_001 + i, f"health check failed for replica-{i % 4}", "CRITICAL" if i % 100 == 0 else "ERROR"))
    digest = build_digest(lines, budget_tokens=300)
    first = digest.templates[0]
    assert first.first_error
    assert first.template == "TPU runtime: HBM out of memory on chip <*>"
    assert first.exemplars[0].line == 3_001
    rendered = digest.render()
    assert "first-error" in rendered and "L3001 |" in rendered


def test_the_first_error_is_the_first_one_that_says_something_not_a_traceback_header():
    # Issue 41: vLLM prints a crash with its logger prefix on every line (tpu-inference#2453): the
    # first ERROR lines are "EngineCore failed to start." and "Traceback (…):", then frames and
    # code lines; the cause is the exception's own line at the end.
    prefix = "(EngineCore pid=2187) ERROR 11-21 11:21:40 [core.py:1136] "
    lines = [f"(EngineCore pid=2187) INFO 11-21 11:20:{i:02d} [utils.py:93] Prepared token paddings: [16, 32]"
             for i in range(40)]
    lines += [prefix + text for text in (
        "EngineCore failed to start.",
        "Traceback (most recent call last):",
        '  File "/usr/lib/python3.12/site-packages/vllm/v1/engine/core.py", line 1127, in run_engine_core',
        "    engine_core = EngineCoreProc(*args, engine_index=dp_rank, **kwargs)",
        "                  ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
        '  File "/usr/lib/python3.12/site-packages/vllm/v1/core/kv_cache_planning.py", line 76, in _check',
        "    raise ValueError(",
        "ValueError: To serve at least one request with the model's max seq len (32768), (0.75 GiB KV cache is needed",
    )]
    lines.append("(APIServer pid=1) RuntimeError: Engine core initialization failed. See root cause above. "
                 "Failed core proc(s): {'EngineCore': 1}")
    digest = build_digest(lines, budget_tokens=800)
    first = digest.ranked[0]
    assert first.first_error and first.first_line == 48 and first.template.startswith("To serve at least one request")
    # the wrapper, the traceback header and the frames come after it, though they came first in the log
    assert [t.first_line for t in digest.ranked].index(41) > 0 and [t.first_line for t in digest.ranked].index(42) > 0


def test_bursts_rank_above_steady_templates_of_equal_severity():
    lines = []
    for i in range(5_000):
        lines.append(_syslog(i, f"slow query took {i % 90} ms", "WARN"))
        if 2_000 <= i < 2_050:
            lines.append(_syslog(i, f"retrying upload of shard {i}", "WARN"))
        if i % 100 == 50:  # as many lines, spread evenly
            lines.append(_syslog(i, f"cache refill for key k{i}", "WARN"))
    ranked = build_digest(lines).ranked
    order = [t.template for t in ranked]
    assert order.index("retrying upload of shard <*>") < order.index("cache refill for key <*>")


# --- budget, citations, truncation -----------------------------------------------------------


def _mixed_log(seed: int = 7, size: int = 6_000) -> list[str]:
    rng = random.Random(seed)
    levels = ["INFO"] * 8 + ["WARN", "ERROR"]
    lines = []
    for i in range(size):
        kind = rng.randrange(60)
        lines.append(
            _syslog(i, f"event{kind % 20} kind {kind} from host-{rng.randrange(99)} took {rng.randrange(1000)} ms", rng.choice(levels))
            if kind < 40
            else _syslog(i, f"component {['alpha', 'beta', 'gamma'][kind % 3]} phase {kind} state changed to s{rng.randrange(9)}x", "INFO")
        )
    return lines


@pytest.mark.parametrize("budget", [80, 150, 300, 700, 1_500, 4_000, DEFAULT_BUDGET])
def test_digest_never_exceeds_its_token_budget(budget):
    digest = build_digest(_mixed_log(), budget_tokens=budget)
    assert digest.tokens == estimate_tokens(digest.render())
    assert digest.tokens <= budget
    data = digest.to_json()
    assert data["tokens"] <= budget
    assert data["omitted_templates"] + len(data["templates"]) == data["template_count"]


def test_bigger_budget_shows_more():
    small = build_digest(_mixed_log(), budget_tokens=300)
    large = build_digest(_mixed_log(), budget_tokens=4_000)
    assert len(large.templates) > len(small.templates)
    shown = lambda d: sum(d.shown_exemplars.values())  # noqa: E731
    assert shown(large) > shown(small)


def test_exemplar_line_numbers_point_at_the_original_lines():
    lines = _mixed_log(seed=3, size=2_000)
    digest = build_digest(lines, budget_tokens=DEFAULT_BUDGET)
    checked = 0
    for template in digest.to_json()["templates"]:
        assert 1 <= template["first_line"] <= len(lines)
        assert lines[template["first_line"] - 1] == template["exemplars"][0]["text"] or template["first_error"]
        for exemplar in template["exemplars"]:
            assert lines[exemplar["line"] - 1] == exemplar["text"]
            checked += 1
    assert checked > 20
    # the rendered text cites the same numbers
    for line in digest.render().splitlines():
        if line.startswith("  L"):
            number, text = line.strip()[1:].split(" | ", 1)
            assert lines[int(number) - 1] == text


def test_template_json_shape_and_counts_add_up():
    lines = _mixed_log(seed=5, size=3_000)
    data = build_digest(lines, budget_tokens=DEFAULT_BUDGET).to_json()
    assert data["total_lines"] == 3_000
    for template in data["templates"]:
        assert set(template) >= {"template", "count", "severity", "first_line", "exemplars"}
        assert 1 <= len(template["exemplars"]) <= 3
        assert template["severity"] in {"INFO", "WARNING", "ERROR"}
    assert sum(t["count"] for t in data["templates"]) + data["omitted_lines"] == 3_000
    json.dumps(data)  # serialisable


def test_monster_lines_are_truncated():
    blocks = " ".join(f"blk_{7_000_000_000_000 + i}" for i in range(3_000))
    lines = [_syslog(1, "starting"), _syslog(2, f"ask 10.0.0.1:50010 to delete {blocks}", "WARN")]
    digest = build_digest(lines, budget_tokens=2_000)
    rendered = digest.render()
    assert len(rendered) < 2_000
    assert "chars]" in rendered
    assert digest.tokens <= 2_000
    warn = next(t for t in digest.templates if t.severity == WARNING)
    assert warn.exemplars[0].line == 2


def test_secrets_are_redacted_in_the_digest():
    lines = [
        _syslog(1, "calling https://admin:hunter2@db.internal:5432/app", "ERROR"),
        _syslog(2, "slack auth with xoxb-1234567890-abcdefghijklmnop failed", "ERROR"),
    ]
    digest = build_digest(lines)
    text = digest.render() + json.dumps(digest.to_json())
    assert "hunter2" not in text and "xoxb-1234567890" not in text
    assert "[REDACTED:password]" in text and "[REDACTED:slack-token]" in text


# Real counts measured with Gemma's 262k vocabulary (/work/shared/tools/build_gemma_tokenizer.py).
MEASURED_TOKENS = [
    (53, "081109 203615 148 INFO dfs.DataNode$PacketResponder: PacketResponder 1 for block blk_38865049064139660 terminating"),
    (95, "payload=Kw2EQtfni6wx7r6i31pu2XaFqudk/PwZsu9D3ws80lNCPaySDkPK59FcXCsBKugGVJNZaSwhIGgDK2z+HLwzE7lybhrTDgUgbBqzUW2jcnlXwzXzAH+mlJztC3MbpHdpUkFqNTM="),
    (39, "request 3f9c2a1e-7b4d-4e8a-9c0f-1d2e3f4a5b6c done"),
    (20, "id ct9pxvLFVPQiTRTZ token HYLUtUkAvpOqErSB"),
    (35, "pod worker-7xk2p9qz4m-b8d3f restarted on node gke-prod-pool-a1b2c3d4"),
    (11, "session opened for user root by (uid=0)"),
    (25, "T3 ERROR x12 L40-L977: Failed password for <*> from <*> port <*> ssh2"),
]


@pytest.mark.parametrize(("real", "text"), MEASURED_TOKENS)
def test_estimate_is_at_or_above_the_real_gemma_count(real, text):
    assert real <= estimate_tokens(text) <= 1.5 * real


def test_estimate_counts_digits_one_per_token_and_random_ids_in_short_pieces():
    assert 10 <= estimate_tokens("1234567890") <= 11  # one per digit, plus the margin
    # same length, same letters per case: a word pair is cheap, a random id is not
    assert estimate_tokens("PacketResponder") < estimate_tokens("PcRkeEtaSpOnDre")


# --- inputs ------------------------------------------------------------------------------------


def test_a_stream_is_read_line_by_line_plain_or_gzip():
    import gzip
    import io

    from agent.digest import lines_from_stream

    text = b"first\r\nsecond \xff\nthird"
    assert list(lines_from_stream(io.BytesIO(text))) == ["first", "second \ufffd", "third"]
    assert list(lines_from_stream(io.BytesIO(gzip.compress(text)))) == ["first", "second \ufffd", "third"]
    stream = io.BytesIO(b"a\nb\n")
    lines = lines_from_stream(stream)
    assert next(lines) == "a"  # a generator: nothing is read ahead of the digest
    assert list(lines) == ["b"]
    assert not stream.closed  # closing is the caller's business


def test_gzip_bytes_and_cloud_logging_entries_become_lines():
    import gzip

    assert lines_from_bytes(gzip.compress(b"a 1\nb 2\n")) == ["a 1", "b 2"]
    entry = {
        "timestamp": "2024-03-01T12:00:00Z",
        "severity": "ERROR",
        "resource": {"type": "tpu_worker", "labels": {}},
        "jsonPayload": {"message": "XLA compile failed"},
    }
    (line,) = list(lines_from_entries([entry]))
    parsed = split_header(line)
    assert parsed.message == "XLA compile failed"
    assert parsed.severity == ERROR


def test_lines_of_one_shape_get_the_same_signature_and_severity_as_a_fresh_parse():
    """The per-line cache (shapes.py) must answer exactly what the full pipeline would."""
    from agent.digest import DigestBuilder
    from agent.digest.shapes import LineShapes

    variants = []
    for line, *_ in HEADER_CASES:
        variants += [line, line.replace("1", "7"), line.replace("0", "93"), line + " trailing words", line[: len(line) // 2]]
    cached = DigestBuilder()
    ids = [cached.add(line) for line in variants * 2]  # the second pass is served from the cache
    assert len(cached._shapes._known) > len(HEADER_CASES)

    class NoShapes(LineShapes):
        def get(self, shape):
            return None

    fresh = DigestBuilder()
    fresh._shapes = NoShapes()
    assert [fresh.add(line) for line in variants * 2] == ids
    assert cached._severity == fresh._severity
    assert [t.template for t in cached.summaries()] == [t.template for t in fresh.summaries()]


# --- exact token counts through vLLM's /tokenize ------------------------------------------------


class _FakeTokenize:
    """vLLM's POST /tokenize: {"model","prompt"} -> {"count","tokens","max_model_len"}; counts
    one token per 2 characters so the answer differs from the offline estimate."""

    def __init__(self):
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.prompts: list[dict] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.prompts.append(body)
                count = (len(body["prompt"]) + 1) // 2
                payload = json.dumps({"count": count, "tokens": list(range(count)), "max_model_len": 16384}).encode()
                self.send_response(200 if self.path == "/tokenize" else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args):
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"


def test_exact_token_count_through_tokenize_route_fits_the_budget():
    from agent.digest import VLLMTokenizer

    fake = _FakeTokenize()
    try:
        tokenizer = VLLMTokenizer(fake.url, "google/gemma-4")
        digest = build_digest(_mixed_log(), budget_tokens=1_000, tokenizer=tokenizer)
    finally:
        fake.server.shutdown()
    assert digest.tokens_exact
    assert digest.tokens == (len(digest.render()) + 1) // 2 <= 1_000
    assert fake.prompts and fake.prompts[0]["model"] == "google/gemma-4"
    # the estimate over-counts this fake tokenizer, so the exact count buys more content
    assert len(digest.render()) > len(build_digest(_mixed_log(), budget_tokens=1_000).render())


def test_tokenize_endpoint_down_falls_back_to_the_estimate():
    from agent.digest import VLLMTokenizer

    fake = _FakeTokenize()
    url = fake.url
    fake.server.shutdown()
    fake.server.server_close()
    digest = build_digest(_mixed_log(), budget_tokens=500, tokenizer=VLLMTokenizer(url, "m", timeout=2))
    assert not digest.tokens_exact
    assert digest.tokens == estimate_tokens(digest.render()) <= 500


TRACEBACK = """2026-12-01T21:30:04Z ERROR worker crashed
Traceback (most recent call last):
  File "x.py", line 3, in <module>
OSError: [Errno 122] Disk quota exceeded""".split("\n")


def test_a_record_with_one_timestamp_has_no_none_in_its_span():
    """Issue 29 item 6: a header without a time (`OSError: …`) is not the span's last time."""
    digest = build_digest(TRACEBACK)
    header = digest.text.splitlines()[0]
    assert "None" not in header and header.endswith(", 2026-12-01T21:30:04Z")
    assert digest.first_time == digest.last_time == "2026-12-01T21:30:04Z"


def test_an_exception_class_with_errno_is_an_error():
    digest = build_digest(TRACEBACK)
    quota = next(t for t in digest.templates if "Disk quota exceeded" in t.template)
    assert quota.severity_name == "ERROR"
    assert build_digest(["a field named errorCount=0"]).templates[0].severity_name == "DEFAULT"
