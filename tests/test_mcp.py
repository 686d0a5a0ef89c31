"""`tpubot mcp` end to end: the real server as a subprocess, driven by the MCP SDK's own stdio client.

Around it run the same parts as in production: a real Redis-protocol server, a `tpubot worker`
subprocess creating queued resources in the TPU API emulator, and the Slack Web API stand-in
that records the status card the worker posts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import redis as redis_sync
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from typer.testing import CliRunner
from waiting import wait_for

from agent.actions import REGISTRY
from bot.cli import app
from bot.mcp_server import needs_confirm
from infra.sandbox.slack_api import SlackApiSandbox
from infra.sandbox.tpu_api import SandboxTimings, TpuSandbox

pytestmark = pytest.mark.e2e  # runs our own processes (conftest tier_of)

TPUBOT = Path(sys.executable).with_name("tpubot")
TEAM, CHANNEL = "T0MCP", "C0MCP"
ME, INTRUDER, ADMIN = "UMCPDEV", "UINTRUDER", "UADMIN"
CALL_TIMEOUT = 30  # seconds for one MCP request, start-up included


def base_env(redis_url: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "GCP_", "TPU_", "MCP_", "ADMINS"))}
    env.update({"REDIS_URL": redis_url, "TPUBOT_ENV_FILE": os.devnull, "POLL_INTERVAL": "0.2s",
                "MCP_TEAM": TEAM, "MCP_CHANNEL": CHANNEL, "MCP_USER": ME, "ADMINS": ADMIN, **extra})
    return env


@asynccontextmanager
async def mcp_client(env: dict[str, str], cwd: Path):
    errlog = open(cwd / f"mcp-{env['MCP_USER']}.stderr", "w")
    params = StdioServerParameters(command=str(TPUBOT), args=["mcp"], env=env, cwd=str(cwd))
    try:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write, read_timeout_seconds=CALL_TIMEOUT) as session:
                await session.initialize()
                yield session
    finally:
        errlog.close()


def lease_keys(redis_url: str) -> list[bytes]:
    client = redis_sync.Redis.from_url(redis_url)
    try:
        return client.keys("tpubot:lease:*")
    finally:
        client.close()


def lease_state(redis_url: str) -> str | None:
    client = redis_sync.Redis.from_url(redis_url, decode_responses=True)
    try:
        return client.hget(f"tpubot:lease:{TEAM}:{CHANNEL}", "state")
    finally:
        client.close()


def audit_rows(redis_url: str) -> list[dict]:
    client = redis_sync.Redis.from_url(redis_url, decode_responses=True)
    try:
        return [fields for _id, fields in client.xrange("tpubot:audit")]
    finally:
        client.close()


@pytest.fixture
def cloud(redis_url, tmp_path):
    """The TPU API emulator, the Slack stand-in and a `tpubot worker` subprocess on one Redis."""
    tpu = TpuSandbox(timings=SandboxTimings(creating=0.05, waiting=0.2, provisioning=0.2, deleting=0.05))
    slack = SlackApiSandbox(token="xoxb-mcp-test")
    env = base_env(redis_url, TPU_API_ENDPOINT=tpu.start(), SLACK_API_URL=slack.start(), SLACK_BOT_TOKEN=slack.token)
    worker = subprocess.Popen([str(TPUBOT), "worker"], env=env, cwd=tmp_path,
                              stdout=subprocess.DEVNULL, stderr=open(tmp_path / "worker.stderr", "w"))
    try:
        yield env, tpu, slack
    finally:
        worker.terminate()
        try:
            worker.wait(timeout=15)
        except subprocess.TimeoutExpired:
            worker.kill()
        slack.stop()
        tpu.stop()


def text_of(result) -> str:
    return "\n".join(block.text for block in result.content)


# --- the must-show test -----------------------------------------------------------------


async def test_mcp_tools_match_the_registry_and_provision_needs_confirm(cloud, redis_url, tmp_path):
    env, tpu, slack = cloud
    async with mcp_client(env, tmp_path) as mcp:
        # Tools are the registry: same names, descriptions, argument schemas (+ confirm on writes),
        # less what this deployment does not wire (no Logging emulator here: no query_cloud_logs).
        tools = {tool.name: tool for tool in (await mcp.list_tools()).tools}
        assert set(tools) == set(REGISTRY) - {"query_cloud_logs"}
        assert {name for name, a in REGISTRY.items() if needs_confirm(a)} >= {"provision", "teardown"}
        for name, tool in tools.items():
            action = REGISTRY[name]
            assert tool.description.startswith(action.description)
            schema = dict(tool.input_schema)
            properties = dict(schema.pop("properties", {}))
            declared = action.tool_declaration()["function"]["parameters"]
            assert tool.annotations.read_only_hint is action.read_only
            if not needs_confirm(action):
                assert tool.annotations.destructive_hint is not True
                assert "confirm" not in properties
                assert {**schema, "properties": properties} == declared
            elif action.reads_only is not None:
                # Some calls only read (oncall without arguments): confirm is offered, not required.
                assert tool.annotations.destructive_hint is True
                assert properties.pop("confirm")["type"] == "boolean" and "confirm" not in schema.get("required", [])
                assert {**schema, "properties": properties} == declared
            else:
                assert tool.annotations.destructive_hint is True
                assert properties.pop("confirm")["type"] == "boolean" and "confirm" in schema["required"]
                schema["required"] = [r for r in schema["required"] if r != "confirm"]
                if not schema["required"]:
                    del schema["required"]
                assert {**schema, "properties": properties} == declared

        status = await mcp.call_tool("status", {})
        assert not status.is_error and "holds no TPU" in text_of(status)

        zones = await read_zones(mcp)
        assert "us-west4-a" in zones

        # Without confirm: refused, and nothing anywhere changed.
        refused = await mcp.call_tool("provision", {"zone": "us-west4-a"})
        assert refused.is_error and "confirm: true" in text_of(refused) and "Nothing changed" in text_of(refused)
        refused_false = await mcp.call_tool("provision", {"confirm": False})
        assert refused_false.is_error
        assert lease_keys(redis_url) == [] and tpu.queued_resources() == []

        # Bad arguments with confirm: the argument model's message, nothing changed.
        bad = await mcp.call_tool("provision", {"zone": "mars-north1-z", "confirm": True})
        assert bad.is_error and "not one of the configured zones" in text_of(bad)
        assert lease_keys(redis_url) == []

        # With confirm: the same provision action → one lease, and the worker creates one QR.
        created = await mcp.call_tool("provision", {"zone": "us-west4-a", "hours": 1, "confirm": True})
        assert not created.is_error, text_of(created)
        assert created.structured_content["holder"] == ME and created.structured_content["zone"] == "us-west4-a"
        assert len(lease_keys(redis_url)) == 1
        await wait_for(lambda: lease_state(redis_url) == "ACTIVE")
        assert [q["state"] for q in tpu.queued_resources()] == ["ACTIVE"]
        assert tpu.queued_resources()[0]["qr_id"] == created.structured_content["queued_resource"]

        # The channel's status card is the same one a Slack /tpu up gets.
        await wait_for(lambda: slack.channel_messages(CHANNEL))
        assert len(slack.calls_to("chat.postMessage")) == 1

        # A second provision in the same channel names the holder and creates nothing.
        again = await mcp.call_tool("provision", {"confirm": True})
        assert again.is_error and f"held by @{ME}" in text_of(again)
        assert len(lease_keys(redis_url)) == 1 and len(tpu.create_attempts) == 1

        # The lease list resource shows it; status agrees.
        leases = json.loads((await mcp.read_resource("tpubot://leases")).contents[0].text)["leases"]
        assert [(held["channel"], held["holder"], held["lease_id"]) for held in leases] == [
            (CHANNEL, ME, created.structured_content["lease_id"])]
        status = await mcp.call_tool("status", {})
        assert status.structured_content["lease"]["state"] == "ACTIVE"

        # Teardown: refused without confirm; with it, the Slack confirm-button path releases the TPU.
        assert (await mcp.call_tool("teardown", {})).is_error
        assert len(lease_keys(redis_url)) == 1
        gone = await mcp.call_tool("teardown", {"confirm": True})
        assert not gone.is_error and gone.structured_content["state"] == "TEARING_DOWN"
        await wait_for(lambda: not lease_keys(redis_url))
        await wait_for(lambda: all(q["state"] != "ACTIVE" for q in tpu.queued_resources()))

    # Every change is in the audit stream under the MCP identity.
    mine = [(row["action"], row["outcome"]) for row in audit_rows(redis_url) if row["actor"] == ME]
    assert ("down", "confirmed") in mine
    assert any(action in ("up", "provision") for action, _ in mine)


async def read_zones(mcp: ClientSession) -> str:
    """The `zones` tool once it is registered (issue 3); the zones resource in any case."""
    resource = (await mcp.read_resource("tpubot://zones")).contents[0].text
    if "zones" in REGISTRY:
        result = await mcp.call_tool("zones", {})
        assert not result.is_error, text_of(result)
        return text_of(result) + resource
    return resource


# --- the same holder/admin rules as Slack -------------------------------------------------


async def test_only_the_holder_or_an_admin_tears_down_over_mcp(redis_url, tmp_path):
    # No worker: the rules live in Redis and the request side, which is all this needs.
    async with mcp_client(base_env(redis_url), tmp_path) as mine:
        created = await mine.call_tool("provision", {"confirm": True})
        assert not created.is_error, text_of(created)
        lease_id = created.structured_content["lease_id"]

    async with mcp_client(base_env(redis_url, MCP_USER=INTRUDER), tmp_path) as intruder:
        denied = await intruder.call_tool("teardown", {"confirm": True})
        assert denied.is_error and f"Only @{ME} (the holder) or an admin" in text_of(denied)
        held = await intruder.call_tool("provision", {"confirm": True})
        assert held.is_error and f"held by @{ME}" in text_of(held)
        state = (await intruder.call_tool("status", {})).structured_content["lease"]
        assert state["lease_id"] == lease_id and state["state"] == "PENDING"

    async with mcp_client(base_env(redis_url, MCP_USER=ADMIN), tmp_path) as admin:
        done = await admin.call_tool("teardown", {"confirm": True})
        assert not done.is_error and done.structured_content["state"] == "TEARING_DOWN"


# --- listing and docs -------------------------------------------------------------------


def test_mcp_list_prints_every_registered_tool():
    result = CliRunner().invoke(app, ["mcp", "--list"])
    assert result.exit_code == 0, result.output
    for name, action in REGISTRY.items():
        assert f"{name}  (" in result.output and action.description in result.output
    assert "provision  (write, destructive, needs confirm: true)" in result.output
    assert "status  (read-only)" in result.output


def test_committed_commands_doc_matches_the_registries():
    from bot.docs import DOC_PATH, render_commands_doc

    committed = (Path(__file__).resolve().parents[1] / DOC_PATH).read_text(encoding="utf-8")
    assert committed == render_commands_doc(), "docs/commands.md is stale: run `tpubot docs`"


def test_docs_check_flags_a_stale_file(tmp_path):
    stale = tmp_path / "docs" / "commands.md"
    stale.parent.mkdir()
    stale.write_text("# old\n")
    runner = CliRunner()
    assert runner.invoke(app, ["docs", "--check", "--root", str(tmp_path)]).exit_code == 1
    assert runner.invoke(app, ["docs", "--root", str(tmp_path)]).exit_code == 0
    assert runner.invoke(app, ["docs", "--check", "--root", str(tmp_path)]).exit_code == 0
    assert "/tpu up [zone] [duration]" in stale.read_text() and "### `provision`" in stale.read_text()


def test_print_config_names_this_install_by_its_full_path(tmp_path):
    """Issue 44: the README's `"command": "tpubot"` works only with the venv on the client's PATH."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    tpubot = Path(sys.executable).with_name("tpubot")
    done = subprocess.run([str(tpubot), "mcp", "--print-config"], capture_output=True, text=True, timeout=60,
                          cwd=tmp_path, env={**os.environ, "PATH": "/usr/bin:/bin"})  # the venv not on PATH
    assert done.returncode == 0, done.stderr
    entry = json.loads(done.stdout)["mcpServers"]["tpubot-local"]
    command = Path(entry["command"])
    assert command.is_absolute() and command.name == "tpubot" and os.access(command, os.X_OK)
    assert entry["args"] == ["mcp"]
