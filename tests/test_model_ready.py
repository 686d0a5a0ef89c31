"""After ACTIVE: BOOTING MODEL → READY with the endpoint and TTFT/TPOT, measured on the node's own endpoint.

The sandbox gives every ACTIVE node an emulated vLLM (labelled as the sandbox model) on its own
loopback address at the model port, so the endpoint is derived exactly as for a real VM.
"""

from __future__ import annotations

import json
import subprocess

import httpx
import logging
import re

import pytest

from bot.wiring import startup_script_from
from infra.sandbox.gcp_project_api import _now_rfc3339

CHANNEL = "C0MODEL"


def card_bodies(bot) -> list[dict]:
    return [c.body for c in bot.slack.calls if c.method in ("chat.postMessage", "chat.update")]


def test_up_ends_ready_with_endpoint_ttft_and_tpot_and_no_secret_anywhere(make_bot, caplog):
    caplog.set_level(logging.DEBUG)
    bot = make_bot(poll_interval="0.2s")
    slack = bot.signed_requests()
    slack.slash("up", user="UALICE", channel=CHANNEL)
    ready = bot.until(lambda: next((b for b in card_bodies(bot) if "READY" in b["text"]), None))
    texts = [b["text"] for b in card_bodies(bot)]
    booting = next(i for i, t in enumerate(texts) if "BOOTING MODEL" in t)
    assert booting < texts.index(ready["text"])

    # The endpoint is the node's external IP at the model port, and that is where the model answered.
    qr = bot.tpu_sandbox.queued_resources()[0]
    (zone, node_id), base_url = next(iter(bot.node_models.running().items()))
    assert (zone, node_id) == (qr["zone"], qr["node_id"])
    blocks = str(ready["blocks"])
    endpoint = re.search(r"`(http://[0-9.]+:\d+/v1)`", blocks).group(1)
    assert endpoint == base_url and endpoint.endswith(f":{bot.settings.model_port}/v1")

    # One real streamed chat completion was measured; never the raw completions route. Besides it,
    # READY took the two correctness checks: a known answer and a tool call, both at temperature 0.
    emulator = bot.node_models.emulator_for(zone, node_id)
    assert len(emulator.requests) == 3
    probe, = [r for r in emulator.requests if r.get("stream")]
    checks = [r for r in emulator.requests if not r.get("stream")]
    assert all(r["temperature"] == 0 for r in checks)
    assert sorted(bool(r.get("tools")) for r in checks) == [False, True]
    assert probe["stream"] is True and probe["stream_options"] == {"include_usage": True}
    assert probe["messages"][0]["role"] == "user"
    ttft, tpot = (float(x) for x in re.search(r"TTFT / TPOT\*\\n([0-9.]+) ms / ([0-9.]+) ms", blocks).groups())
    assert ttft > 0 and 1.0 < tpot < 200.0
    assert "tokens/s" in blocks and "sandbox" in blocks  # the sandbox model says what it is

    status = slack.slash("status", user="UALICE", channel=CHANNEL).json()
    assert "TTFT" in status["text"] and endpoint in str(status["blocks"])

    # What was sent as startup-script is what `tpubot render-startup-script` prints, for this lease's key secret.
    sent = qr["request"]["tpu"]["nodeSpec"][0]["node"]["metadata"]["startup-script"]
    lease_id = qr["labels"]["tpubot-lease"]
    assert sent == startup_script_from(bot.settings)(None).replace("tpubot-model-key-LEASE",
                                                                     f"tpubot-model-key-{lease_id}")

    # The endpoint is private: vLLM (read the key at boot) answers 401 without it, exactly as vLLM does,
    # while the bot's probe above carried the lease's key.
    key = bot.cloud.project_api.secrets[f"tpubot-model-key-{lease_id}"]
    assert key and emulator.api_key == key
    anonymous = httpx.get(f"{endpoint}/models", timeout=5)
    assert (anonymous.status_code, anonymous.text) == (401, '{"error":"Unauthorized"}')
    assert httpx.get(f"{endpoint}/models", headers={"Authorization": f"Bearer {key}"}, timeout=5).status_code == 200
    for text in (str(qr["request"]), caplog.text, *(str(call.body) for call in bot.slack.calls)):
        assert key not in text

    # The HF token is in Secret Manager only: not in metadata, not in Slack, not in any log line.
    token = bot.cloud.world.secrets["hf-token"]
    assert token not in str(qr["request"])
    assert all(token not in str(call.body) for call in bot.slack.calls)
    assert token not in caplog.text
    slack.close()


@pytest.mark.e2e  # runs `tpubot reconcile`
def test_the_leases_api_key_is_destroyed_with_the_lease(make_bot, tmp_path):
    from handlers import cards

    bot = make_bot(poll_interval="0.2s")
    slack = bot.signed_requests()
    slack.slash("up", user="UALICE", channel=CHANNEL)
    bot.until(lambda: next((b for b in card_bodies(bot) if "READY" in b["text"]), None))
    lease_id = bot.tpu_sandbox.queued_resources()[0]["labels"]["tpubot-lease"]
    secret = f"tpubot-model-key-{lease_id}"
    assert bot.cloud.project_api.secrets.get(secret)
    assert bot.cloud.project_api.secret_labels[secret] == {"managed-by": "tpubot", "tpubot-lease": lease_id}
    sweep_orphaned_keys_but_not_this_leases(bot, tmp_path, secret)
    slack.slash("down", user="UALICE", channel=CHANNEL)
    slack.click(action_id=cards.TEARDOWN_CONFIRM_ACTION, value=lease_id, user="UALICE", channel=CHANNEL,
                label="Tear down")
    bot.until(lambda: secret not in bot.cloud.project_api.secrets)
    assert bot.cloud.project_api.rejected == [] and bot.cloud.tpu.rejected == []
    slack.close()


def sweep_orphaned_keys_but_not_this_leases(bot, tmp_path, live_secret: str) -> None:
    """A key whose delete failed at release (no lease, no QR) is deleted by the reconciler once it
    is 15 minutes old; a young one, another tool's secret and the running lease's key stay."""
    from test_expiry_alerts import TPUBOT, worker_env

    project = bot.cloud.project_api
    planted = {"tpubot-model-key-Lold": ("Lold", "2026-01-01T00:00:00Z"),  # as old as the seeded secrets
               "tpubot-model-key-Lyoung": ("Lyoung", None)}
    with project._lock:
        for name, (lease, created) in planted.items():
            project.secrets[name] = "k-" + lease
            project.secret_labels[name] = {"managed-by": "tpubot", "tpubot-lease": lease}
            if created is None:
                project.secret_created[name] = _now_rfc3339()
        project.secrets["tpubot-model-key-Lforeign"] = "theirs"  # not labelled by us: never ours to delete
    done = subprocess.run([str(TPUBOT), "reconcile", "--json"], env=worker_env(bot, tmp_path), cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["keys_deleted"] == ["Lold"] and "keys deleted: Lold" in report["summary"], (report, done.stderr)
    assert "tpubot-model-key-Lold" not in project.secrets
    assert {"tpubot-model-key-Lyoung", "tpubot-model-key-Lforeign", live_secret} <= set(project.secrets)
    assert "k-Lold" not in done.stdout + done.stderr


def test_internal_endpoint_address_reaches_the_model_without_an_external_ip(make_bot):
    bot = make_bot(poll_interval="0.2s", endpoint_address="internal")
    slack = bot.signed_requests()
    slack.slash("up", user="UALICE", channel=CHANNEL)
    ready = bot.until(lambda: next((b for b in card_bodies(bot) if "READY" in b["text"]), None))
    node = bot.tpu_sandbox.queued_resources()[0]["request"]["tpu"]["nodeSpec"][0]["node"]
    assert node["networkConfig"]["enableExternalIps"] is False
    (_, base_url), = bot.node_models.running().items()
    assert f"`{base_url}`" in str(ready["blocks"])  # reached on the node's VPC address
    assert "`vllm/vllm-tpu:v0.32.0`" in str(ready["blocks"])  # the pinned image is on the READY card
    slack.close()


def test_sandbox_vllm_guards_v1_exactly_as_vllms_api_key_check():
    import openai

    from infra.sandbox.vllm import LatencyModel, VllmEmulator

    with VllmEmulator(latency=LatencyModel.instant(), api_key="k-right") as emulator:
        base = emulator.base_url  # …/v1
        root = base[: -len("/v1")]
        assert httpx.get(f"{base}/models", headers={"Authorization": "Bearer k-wrong"}).status_code == 401
        assert httpx.get(f"{base}/models", headers={"Authorization": "Basic k-right"}).status_code == 401
        assert httpx.get(f"{base}/models", headers={"Authorization": "bearer k-right"}).status_code == 200
        assert httpx.get(f"{root}/health").status_code == 200  # only /v1… is guarded
        assert httpx.get(f"{root}/metrics").status_code == 200  # (the idle clock reads it without a key)
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=base, api_key="k-wrong", max_retries=0).models.list()
        assert [m.id for m in openai.OpenAI(base_url=base, api_key="k-right").models.list()] == [emulator.model]


def test_the_idle_clock_has_a_figure_as_soon_as_the_model_serves(make_bot):
    """Issue 29 item 9: the first metrics reading waited for the next interval's slot, so a fresh
    READY card and `/tpu status` said "unknown (no metrics yet)". With an hour between readings,
    only a reading taken when the model starts serving can give the figure."""
    bot = make_bot(poll_interval="0.2s", idle_check_interval="1h")
    slack = bot.signed_requests()
    slack.slash("up", user="UALICE", channel=CHANNEL)
    bot.until(lambda: any("READY" in b["text"] for b in card_bodies(bot)))
    status = bot.until(lambda: (card := json.dumps(slack.slash("status", user="UALICE", channel=CHANNEL).json()))
                              and "no metrics yet" not in card and card, timeout=30)
    assert re.search(r"\*Idle\*\\n\d", status), status


def test_the_boots_own_probes_are_not_counted_as_served_traffic(make_bot):
    """Issue 44: the boot's three probe requests counted as served tokens in the receipt and in
    `/tpu spend` ("Served 3 requests and 73 output tokens" on a TPU nobody used). The usage totals
    start after them."""
    import asyncio

    from redis.asyncio import Redis

    from infra.state.usage import UsageStore

    bot = make_bot(poll_interval="0.2s", idle_check_interval="1h")
    slack = bot.signed_requests()
    slack.slash("up", user="UALICE", channel=CHANNEL)
    bot.until(lambda: any("READY" in b["text"] for b in card_bodies(bot)))
    (zone, node_id), base_url = next(iter(bot.node_models.running().items()))
    lease_id = bot.tpu_sandbox.queued_resources()[0]["qr_id"].removeprefix("tpubot-")

    def usage():
        async def read():
            redis = Redis.from_url(bot.redis.url)
            try:
                return await UsageStore(redis).get(lease_id)
            finally:
                await redis.aclose()
        return asyncio.run(read())

    first = bot.until(lambda: (state := usage()).metrics_at and state, what="the first metrics reading")
    assert (first.requests, first.output_tokens) == (0, 0), first  # three probes ran: none is traffic
    assert len(bot.node_models.emulator_for(zone, node_id).requests) == 3


def test_the_receipt_counts_what_was_served_after_the_last_idle_check(make_bot):
    """Issue 44 walk: a 12 s lease with a `/tpu ask` and a 16-request `/tpu bench` got a receipt of
    "Served 0 requests and 0 output tokens": the receipt is written after the delete, when the
    endpoint is gone, so it had only the idle clock's first reading (the boot's probes, excluded).
    The teardown reads the counters once more before it deletes."""
    from handlers import cards

    bot = make_bot(poll_interval="0.2s", idle_check_interval="1h")
    slack = bot.signed_requests()
    slack.slash("up", user="UALICE", channel=CHANNEL)
    bot.until(lambda: any("READY" in b["text"] for b in card_bodies(bot)))
    (zone, node_id), base_url = next(iter(bot.node_models.running().items()))
    emulator = bot.node_models.emulator_for(zone, node_id)
    probes = len(emulator.requests)
    # The idle clock's first reading, taken as the model serves, is the last one before the teardown.
    status = bot.until(lambda: (card := json.dumps(slack.slash("status", user="UALICE", channel=CHANNEL).json()))
                              and "no metrics yet" not in card and card, timeout=30)
    assert status
    headers = {"Authorization": f"Bearer {emulator.api_key}"} if emulator.api_key else {}
    tokens = 0
    for n in range(4):
        answer = httpx.post(f"{base_url}/chat/completions", headers=headers, timeout=30, json={
            "model": bot.settings.model_name, "max_tokens": 8,
            "messages": [{"role": "user", "content": f"say {n}"}]})
        assert answer.status_code == 200, answer.text
        tokens += answer.json()["usage"]["completion_tokens"]
    assert tokens > 0
    lease_id = bot.tpu_sandbox.queued_resources()[0]["labels"]["tpubot-lease"]
    slack.slash("down", user="UALICE", channel=CHANNEL)
    slack.click(action_id=cards.TEARDOWN_CONFIRM_ACTION, value=lease_id, user="UALICE", channel=CHANNEL,
                label="Tear down")
    receipt = bot.until(lambda: next((c.body["text"] for c in bot.slack.calls_to("chat.postMessage")
                                     if c.body.get("text", "").startswith(":receipt:")), None), what="the receipt")
    assert len(emulator.requests) == probes + 4
    assert f"Served 4 requests and {tokens:,} output tokens: $" in receipt, receipt
    # `/tpu spend` settles from the same totals: its $/M out column has a figure, not a dash.
    spend = bot.until(lambda: (text := slack.slash("spend", user="UALICE", channel=CHANNEL).text)
                             and re.search(r"#c0model\s+1\s", text) and text, what="the lease settled in /tpu spend")
    row = re.search(r"#c0model\s+1\s+\S+\s+\S+\s+(\S+)", spend)
    assert row and re.fullmatch(r"\d+\.\d{3}", row.group(1)), spend
    slack.close()
