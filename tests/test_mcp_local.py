"""`tpubot mcp` as a terminal AI client uses it: nothing configured but the command itself.

Without REDIS_URL the server runs the lease jobs in-process on the embedded defaults (embedded
Redis, the sandbox cloud with a sandbox vLLM on every READY node), so the whole life of a TPU
— provision, READY, asking the model, digesting logs, teardown — happens over the MCP SDK's own
stdio client. The path rules of `summarize_logs` are checked against the same `call_tool` the
stdio server runs, in-process.
"""

from __future__ import annotations

import gzip
import os
import socket
import sys
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from waiting import wait_for

from bot.mcp_server import McpSession, actor_from, call_tool
from bot.settings import Settings
from bot.wiring import build_services
from infra.local_files import LocalFiles, NoLocalFiles
from infra.slack_files import MAX_LOG_FILE_BYTES

TPUBOT = Path(sys.executable).with_name("tpubot")
READY_WITHIN = 120.0  # seconds: the "status READY within two minutes"
PLANTED = "2026-12-01T21:40:07Z ERROR storage: disk quota exceeded on /mnt/ckpt (wrote 0 of 4096 bytes)"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def plain_env() -> dict[str, str]:
    """The environment of a developer's terminal with no tpubot settings at all."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLACK_", "GCP_", "TPU_", "MCP_", "ADMINS", "REDIS", "GEMMA_", "MODEL_"))}
    # No tpu.env; a model port of our own, so sandbox nodes of other test runs on this machine cannot answer.
    return {**env, "TPUBOT_ENV_FILE": os.devnull, "MODEL_PORT": str(free_port())}


@asynccontextmanager
async def mcp_client(env: dict[str, str], cwd: Path):
    errlog = open(cwd / "mcp.stderr", "w")
    params = StdioServerParameters(command=str(TPUBOT), args=["mcp"], env=env, cwd=str(cwd))
    try:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write, read_timeout_seconds=60) as session:
                await session.initialize()
                yield session
    finally:
        errlog.close()


def text_of(result) -> str:
    return "\n".join(block.text for block in result.content)


def log_lines(n: int = 60) -> list[str]:
    lines = [f"2026-12-01T21:{i // 60 + 30:02d}:{i % 60:02d}Z INFO worker: step {i} done in {20 + i % 7} ms"
             for i in range(n)]
    lines[n // 2] = PLANTED
    return lines


# --- the must-show: a TPU to READY and back with nothing but `tpubot mcp` -------------------


@pytest.mark.e2e
async def test_mcp_without_redis_url_takes_a_tpu_to_ready_and_back(tmp_path):
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "train.log.gz").write_bytes(gzip.compress("\n".join(log_lines()).encode()))
    async with mcp_client(plain_env(), tmp_path) as mcp:
        # The first result says which mode this is.
        status = await mcp.call_tool("status", {})
        assert not status.is_error, text_of(status)
        assert text_of(status).startswith("[local mode: REDIS_URL is unset")
        assert "holds no TPU" in text_of(status)
        assert "local mode" not in text_of(await mcp.call_tool("status", {}))  # said once

        created = await mcp.call_tool("provision", {"confirm": True})
        assert not created.is_error, text_of(created)

        async def state() -> str | None:
            lease = (await mcp.call_tool("status", {})).structured_content["lease"]
            return lease and lease["state"] in ("READY", "FAILED") and lease["state"]

        assert await wait_for(state, timeout=READY_WITHIN, interval=0.5, what="status READY") == "READY"

        # Logs handed in: pasted text, and a .gz file under the working directory.
        pasted = await mcp.call_tool("summarize_logs", {"text": "\n".join(log_lines())})
        assert not pasted.is_error, text_of(pasted)
        assert "L31" in text_of(pasted) and "disk quota exceeded on /mnt/ckpt" in text_of(pasted)
        filed = await mcp.call_tool("summarize_logs", {"path": "logs/train.log.gz", "contains": "error"})
        assert not filed.is_error, text_of(filed)
        assert "Sources: L1-L60 file logs/train.log.gz" in text_of(filed)
        assert "L31" in text_of(filed) and "disk quota exceeded on /mnt/ckpt" in text_of(filed)
        assert "DEFAULT" not in text_of(filed)  # the lines `contains` drops are no template of their own

        # Reading on-call needs no confirm; setting it does.
        oncall = await mcp.call_tool("oncall", {})
        assert not oncall.is_error and "alerts page the lease holder" in text_of(oncall), text_of(oncall)
        setting = await mcp.call_tool("oncall", {"mentions": ["<@U0SRE>"]})
        assert setting.is_error and "confirm: true" in text_of(setting)

        # The model, asked directly, with timings; and its health.
        asked = await mcp.call_tool("ask_model", {"prompt": "What is a TPU?", "max_tokens": 64})
        assert not asked.is_error, text_of(asked)
        data = asked.structured_content
        assert data["answer"] and data["source"] == "this channel's TPU"
        assert data["ttft_ms"] > 0 and data["tpot_ms"] > 0 and data["tokens_per_s"] > 0
        assert data["prompt_tokens"] > 0 and 1 < data["output_tokens"] <= 64
        assert "TTFT" in text_of(asked) and "TPOT" in text_of(asked) and "tok/s" in text_of(asked)
        health = await mcp.call_tool("model_health", {})
        assert not health.is_error, text_of(health)
        assert health.structured_content["models"] == ["google/gemma-4-E2B-it"]
        assert health.structured_content["vllm_version"] and health.structured_content["round_trip_ok"]
        assert health.structured_content["kv_cache_usage"] is not None
        assert health.structured_content["requests_running"] is not None

        # Teardown with confirm releases the channel.
        gone = await mcp.call_tool("teardown", {"confirm": True})
        assert not gone.is_error, text_of(gone)

        async def released() -> bool:
            return "holds no TPU" in text_of(await mcp.call_tool("status", {}))

        await wait_for(released, timeout=60, interval=0.5, what="lease released")
        after = await mcp.call_tool("ask_model", {"prompt": "still there?"})
        assert after.is_error and "no READY TPU" in text_of(after)


# --- summarize_logs' path rules, through the server's call_tool -----------------------------


@asynccontextmanager
async def session_in(root: Path, redis_url: str, **settings):
    config = Settings.load(root / "none.env", redis_url=redis_url, **settings)
    services, redis, pool = await build_services(config, redis_url=redis_url)
    services.local_files = LocalFiles(root, allow_outside=config.mcp_read_outside_cwd)
    try:
        yield McpSession(services, actor_from(config))
    finally:
        await pool.aclose()
        await redis.aclose()


@pytest.fixture
def tree(tmp_path) -> Path:
    """A working directory with a log in it, and a log beside it (outside)."""
    root = tmp_path / "project"
    (root / "logs").mkdir(parents=True)
    (root / "logs" / "app.log").write_text("\n".join(log_lines()) + "\n")
    (tmp_path / "outside.log").write_text(PLANTED + "\n")
    return root


async def summarize(session: McpSession, **args):
    result = await call_tool(session, "summarize_logs", args)
    return result, text_of(result)


async def test_a_path_outside_the_working_directory_is_refused(tree, redis_url):
    (tree / "escape.log").symlink_to(tree.parent / "outside.log")
    async with session_in(tree, redis_url) as session:
        for path in ("../outside.log", str(tree.parent / "outside.log"), "escape.log", "logs/../../outside.log"):
            result, text = await summarize(session, path=path)
            assert result.is_error, path
            assert "is outside the working directory" in text and "MCP_READ_OUTSIDE_CWD=true" in text, text
            assert "disk quota" not in text
        inside, text = await summarize(session, path=str(tree / "logs" / "app.log"))
        assert not inside.is_error and "disk quota exceeded" in text


async def test_a_setting_allows_paths_outside_the_working_directory(tree, redis_url):
    async with session_in(tree, redis_url, mcp_read_outside_cwd=True) as session:
        result, text = await summarize(session, path="../outside.log")
        assert not result.is_error, text
        assert "disk quota exceeded" in text


async def test_a_missing_file_or_a_directory_is_named(tree, redis_url):
    async with session_in(tree, redis_url) as session:
        result, text = await summarize(session, path="logs/nope.log")
        assert result.is_error and "No file at logs/nope.log" in text
        result, text = await summarize(session, path="logs")
        assert result.is_error and "not a regular file" in text


async def test_a_binary_file_is_refused(tree, redis_url):
    (tree / "core.bin").write_bytes(b"\x7fELF\x02\x01\x01\x00" + os.urandom(2048))
    (tree / "core.bin.gz").write_bytes(gzip.compress(b"ERROR but\x00binary" * 100))
    async with session_in(tree, redis_url) as session:
        for path in ("core.bin", "core.bin.gz"):
            result, text = await summarize(session, path=path)
            assert result.is_error and "looks binary" in text, text


async def test_an_oversized_file_is_refused_before_and_after_gunzip(tree, redis_url):
    big = tree / "huge.log"
    with big.open("wb") as handle:  # sparse: the size is what matters, not the bytes
        handle.truncate(MAX_LOG_FILE_BYTES + 1)
    (tree / "bomb.log.gz").write_bytes(gzip.compress(b"ERROR again and again\n" * (MAX_LOG_FILE_BYTES // 20)))
    assert (tree / "bomb.log.gz").stat().st_size < MAX_LOG_FILE_BYTES
    async with session_in(tree, redis_url) as session:
        result, text = await summarize(session, path="huge.log")
        assert result.is_error and f"{MAX_LOG_FILE_BYTES + 1:,} bytes; the limit is {MAX_LOG_FILE_BYTES:,}" in text
        result, text = await summarize(session, path="bomb.log.gz")
        assert result.is_error and f"expands beyond the {MAX_LOG_FILE_BYTES:,}-byte limit" in text


async def test_text_and_path_together_or_empty_are_refused(tree, redis_url):
    async with session_in(tree, redis_url) as session:
        result, text = await summarize(session, text=PLANTED, path="logs/app.log")
        assert result.is_error and "not both" in text
        result, text = await summarize(session, text="  \n")
        assert result.is_error and "`text` is empty" in text
        result, text = await summarize(session)
        assert result.is_error and "give `text` or `path`" in text


async def test_without_local_files_a_path_is_refused(tree, redis_url):
    # A Slack process has no local files (NoLocalFiles): the bot never reads its own disk for a user.
    async with session_in(tree, redis_url) as session:
        session.services.local_files = NoLocalFiles()
        result, text = await summarize(session, path="logs/app.log")
        assert result.is_error and "does not read files from its own disk" in text


# --- the README's MCP section ------------------------------------------------------------


def test_readme_mcp_configuration_names_real_settings():
    import json
    import re

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Terminal AI clients (MCP)"):]
    config = json.loads(re.search(r"```json\n(.*?)```", section, re.S).group(1))
    servers = config["mcpServers"]
    assert servers["tpubot-local"] == {"command": "tpubot", "args": ["mcp"], "env": {}}
    assert servers["tpubot"]["command"] == "tpubot" and servers["tpubot"]["args"] == ["mcp"]
    fields = {name.upper() for name in Settings.model_fields}
    assert set(servers["tpubot"]["env"]) <= fields
    assert "MCP_READ_OUTSIDE_CWD=true" in section and "MCP_READ_OUTSIDE_CWD" in fields
    assert f"at most {MAX_LOG_FILE_BYTES // 2**20} MiB" in section


# --- ask_model and model_health when the model is not there ----------------------------------


async def test_ask_model_and_model_health_name_an_endpoint_that_does_not_answer(tmp_path, redis_url):
    dead = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens
    async with session_in(tmp_path, redis_url, gemma_base_url=dead) as session:
        asked = await call_tool(session, "ask_model", {"prompt": "hello?"})
        assert asked.is_error and f"The model at {dead} (GEMMA_BASE_URL) did not answer" in text_of(asked)
        health = await call_tool(session, "model_health", {})
        assert health.is_error and "One-token round trip failed" in text_of(health)
        assert health.structured_content["round_trip_ok"] is False
        assert "metrics unavailable" in text_of(health)
        bad = await call_tool(session, "ask_model", {"prompt": ""})
        assert bad.is_error and "at least 1 character" in text_of(bad)


def test_the_mention_agent_may_call_model_health_but_not_ask_itself():
    from agent.llm.prompt import model_tools

    offered = {tool["function"]["name"] for tool in model_tools()}
    assert "model_health" in offered and "ask_model" not in offered


def test_engine_gauges_from_current_and_older_vllm_metrics():
    from infra.vllm_metrics import parse_gauges, version_from_fingerprint

    current = parse_gauges('vllm:num_requests_running{engine="0"} 2.0\nvllm:num_requests_waiting{engine="0"} 1.0\n'
                           'vllm:kv_cache_usage_perc{engine="0"} 0.25\n')
    assert (current.running, current.waiting, current.kv_usage, current.error) == (2.0, 1.0, 0.25, "")
    older = parse_gauges('vllm:gpu_cache_usage_perc{model_name="m"} 0.5\n')
    assert older.kv_usage == 0.5 and older.running is None
    assert parse_gauges("# nothing of vLLM here\nother_metric 1\n").error
    assert version_from_fingerprint("vllm-0.33.0-tp1-1a2b3c4d") == "0.33.0"
    assert version_from_fingerprint("fp_abc") == ""


async def test_a_private_key_handed_in_as_text_or_path_is_blanked_line_by_line(tree, redis_url):
    # Logs handed to summarize_logs get the same intake redaction as a Slack paste: a PEM block
    # spread over lines is blanked whole, not only its BEGIN line.
    body = "MIIEowIBAAKCAQEA7bq9secretbodyline"
    log = ["INFO start", "-----BEGIN RSA PRIVATE KEY-----", body, "-----END RSA PRIVATE KEY-----",
           "ERROR auth failed: Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.sig"]
    (tree / "keys.log").write_text("\n".join(log) + "\n")
    async with session_in(tree, redis_url) as session:
        for args in ({"text": "\n".join(log)}, {"path": "keys.log"}):
            result, text = await summarize(session, **args)
            assert not result.is_error, text
            assert "auth failed" in text and body not in text and "eyJhbGci" not in text, text


async def test_the_deployments_own_secret_values_never_come_back_from_a_tool(tree, redis_url):
    # A signing secret has no shape a pattern finds: the deployment's redactor knows its value (issue 34).
    signing = "4f1c9a0b7e2d8c3f6a5b4e3d2c1b0a99"
    log = ["INFO start", f"DEBUG verifying request signatures with {signing}", "ERROR signature mismatch"]
    (tree / "sig.log").write_text("\n".join(log) + "\n")
    async with session_in(tree, redis_url, slack_signing_secret=signing) as session:
        for args in ({"text": "\n".join(log)}, {"path": "sig.log"}):
            result, text = await summarize(session, **args)
            assert not result.is_error, text
            assert "signature mismatch" in text and signing not in text and "[REDACTED:secret]" in text, text
