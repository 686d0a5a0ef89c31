"""Slack conformance (issue 16): the stand-in refuses what Slack refuses, and the bot copes.

The stand-in's refusals are checked through slack_sdk's own clients (the errors a real
workspace returns: invalid_blocks with its reasons, not_in_channel, channel_not_found,
unknown_method, invalid_auth, not_allowed_token_type). The bot's side runs end to end: signed
requests to the real bolt app, the worker's real jobs, Redis, the TPU emulator.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from urllib.parse import parse_qsl, urlparse

import pytest
import redis as redis_sync
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient
from waiting import wait_until

from bot.local_stack import free_port
from handlers import cards
from handlers.mention_job import thread_lines
from infra.sandbox.slack_api import BOT_USER_ID, SlackApiSandbox
from infra.sandbox.slack_requests import SlackRequests
from infra.state import keys
from infra.state.redis_server import RestartableRedis

CHANNEL = "C0CONF"
PRIVATE = "G0CONF"
ALICE = "UALICE"
TEAM = "T0SANDBOX"
TPUBOT = Path(sys.executable).with_name("tpubot")


@pytest.fixture
def sandbox():
    slack = SlackApiSandbox(token="xoxb-conformance")
    slack.start()
    yield slack
    slack.stop()


def web_client(slack: SlackApiSandbox, token: str | None = None) -> WebClient:
    return WebClient(token=token or slack.token, base_url=slack.base_url)


def refusal(call) -> dict:
    with pytest.raises(SlackApiError) as caught:
        call()
    return caught.value.response.data


# --- the stand-in answers as Slack does ------------------------------------------------------


def test_an_invalid_block_posted_through_slack_sdk_gets_invalid_blocks_with_the_reason(sandbox):
    too_long = {"type": "section", "text": {"type": "mrkdwn", "text": "x" * 3001}}
    answer = refusal(lambda: web_client(sandbox).chat_postMessage(channel=CHANNEL, text="t", blocks=[too_long]))
    assert answer["ok"] is False and answer["error"] == "invalid_blocks"
    (message,) = answer["response_metadata"]["messages"]
    assert message.startswith("[ERROR] ") and "3000" in message and "[json-pointer:/blocks/0" in message
    assert sandbox.channel_messages(CHANNEL) == []  # nothing was posted


@pytest.mark.parametrize("blocks, reason", [
    ([{"type": "no_such_block"}], "unsupported type"),
    ([{"type": "header", "text": {"type": "plain_text", "text": "h" * 151}}], "150"),
    ([{"type": "section", "text": {"type": "mrkdwn", "text": ""}}], "more than 0 characters"),
    ([{"type": "section", "text": {"type": "mrkdwn", "text": "x"}, "colour": "red"}], "additional property"),
    ([{"type": "divider"}] * 51, "at most 50"),
], ids=["unknown-type", "long-header", "empty-text", "unknown-field", "51-blocks"])
def test_slack_sdk_models_and_documented_limits_decide_what_is_refused(sandbox, blocks, reason):
    answer = refusal(lambda: web_client(sandbox).chat_postMessage(channel=CHANNEL, text="t", blocks=blocks))
    assert answer["error"] == "invalid_blocks" and reason in answer["errors"][0]


def test_a_home_view_over_100_blocks_is_refused(sandbox):
    view = {"type": "home", "blocks": [{"type": "divider"}] * 101}
    answer = refusal(lambda: web_client(sandbox).views_publish(user_id=ALICE, view=view))
    assert answer["error"] == "invalid_arguments" and "at most 100" in answer["response_metadata"]["messages"][0]


def test_a_message_needs_text_or_blocks(sandbox):
    assert refusal(lambda: web_client(sandbox).api_call("chat.postMessage", json={"channel": CHANNEL}))["error"] == "no_text"


def test_unknown_methods_and_wrong_tokens_are_refused(sandbox):
    assert refusal(lambda: web_client(sandbox).api_call("chat.postMesage"))["error"] == "unknown_method"
    assert refusal(lambda: web_client(sandbox, "xoxb-wrong").auth_test())["error"] == "invalid_auth"
    assert refusal(lambda: web_client(sandbox, sandbox.app_token).chat_postMessage(channel=CHANNEL, text="x"))["error"] \
        == "not_allowed_token_type"
    assert refusal(lambda: web_client(sandbox).apps_connections_open(app_token=sandbox.token))["error"] \
        == "not_allowed_token_type"
    assert web_client(sandbox).apps_connections_open(app_token=sandbox.app_token)["url"].startswith("ws://")


def test_a_channel_the_bot_was_removed_from_refuses_posts(sandbox):
    client = web_client(sandbox)
    client.chat_postMessage(channel=CHANNEL, text="before")
    sandbox.kick(CHANNEL)
    sandbox.kick(PRIVATE)
    assert refusal(lambda: client.chat_postMessage(channel=CHANNEL, text="after"))["error"] == "not_in_channel"
    # A private channel the bot is not in is invisible to it.
    assert refusal(lambda: client.chat_postMessage(channel=PRIVATE, text="after"))["error"] == "channel_not_found"
    # So is a DM between people; a user id opens the app's own DM with them.
    assert refusal(lambda: client.chat_postMessage(channel="D0PEOPLE", text="hi"))["error"] == "channel_not_found"
    assert client.chat_postMessage(channel=ALICE, text="hi")["channel"].startswith("D")
    sandbox.invite(CHANNEL)
    assert client.chat_postMessage(channel=CHANNEL, text="back")["ok"]


# --- item 4: thread context is the newest messages before the mention ------------------------


def test_thread_context_reads_the_messages_just_above_the_mention_in_a_long_thread(sandbox):
    root = sandbox.add_message(CHANNEL, "root: the deploy broke", user="UROOT")
    for n in range(1, 41):
        sandbox.add_message(CHANNEL, f"message {n}", user="UBOB", thread_ts=root)
    mention = sandbox.add_message(CHANNEL, f"<@{BOT_USER_ID}> what broke?", user=ALICE, thread_ts=root)
    sandbox.add_message(CHANNEL, "a reply after the mention", user="UBOB", thread_ts=root)
    notes: list[str] = []
    client = AsyncWebClient(token=sandbox.token, base_url=sandbox.base_url)
    lines = asyncio.run(thread_lines(client, CHANNEL, root, mention, BOT_USER_ID, notes))
    assert lines[0] == "<@UROOT>: root: the deploy broke"  # the thread's first message stays
    assert lines[-1] == "<@UBOB>: message 40"  # the one just above the mention
    assert "<@UBOB>: message 1" in lines and not any("after the mention" in line for line in lines)
    assert all(c.body.get("limit") in (15, "15") for c in sandbox.calls_to("conversations.replies"))
    assert len(sandbox.calls_to("conversations.replies")) == 3  # 42 messages in pages of 15


def test_thread_context_keeps_the_newest_messages_within_its_token_budget(sandbox):
    root = sandbox.add_message(CHANNEL, "root", user="UROOT")
    for n in range(1, 200):
        sandbox.add_message(CHANNEL, f"message {n} " + "word " * 60, user="UBOB", thread_ts=root)
    mention = sandbox.add_message(CHANNEL, f"<@{BOT_USER_ID}> summarize", user=ALICE, thread_ts=root)
    notes: list[str] = []
    client = AsyncWebClient(token=sandbox.token, base_url=sandbox.base_url)
    lines = asyncio.run(thread_lines(client, CHANNEL, root, mention, BOT_USER_ID, notes))
    assert lines[0] == "<@UROOT>: root" and lines[-1].startswith("<@UBOB>: message 199 ")
    assert "<@UBOB>: message 1 " not in " ".join(lines)  # the oldest ones gave way
    assert any("messages before yours" in note for note in notes)


# --- items 1, 2, 5 end to end -------------------------------------------------------------


def bot_left(slack: SlackRequests, stack, channel: str = CHANNEL) -> None:
    stack.slack.kick(channel)
    assert slack.event({"type": "member_left_channel", "user": BOT_USER_ID, "channel": channel,
                        "channel_type": "C", "team": TEAM}).status == 200


def bot_joined(slack: SlackRequests, stack, channel: str = CHANNEL) -> None:
    stack.slack.invite(channel)
    assert slack.event({"type": "member_joined_channel", "user": BOT_USER_ID, "channel": channel,
                        "channel_type": "C", "team": TEAM}).status == 200


def lease_state(stack, channel: str = CHANNEL) -> bytes | None:
    client = redis_sync.Redis.from_url(stack.redis.url)
    try:
        return client.hget(keys.lease(TEAM, channel), "state")
    finally:
        client.close()


def dms_to(stack, user: str) -> list[str]:
    return [m.text for m in stack.slack.messages if stack.slack.dm_channels.get(m.channel) == user]


def test_up_in_a_channel_the_bot_was_removed_from_claims_nothing_and_says_how_to_fix_it(stack, slack):
    bot_left(slack, stack)
    reply = slack.slash("up", user=ALICE, channel=CHANNEL)
    assert reply.status == 200 and "/invite @tpubot" in reply.text and "Nothing was requested" in reply.text
    assert reply.text.startswith(":warning:")
    assert lease_state(stack) is None and stack.tpu_sandbox.queued_resources() == []
    assert "holds no TPU" in slack.slash("status", user=ALICE, channel=CHANNEL).text
    bot_joined(slack, stack)
    assert "Requested a" in slack.slash("up", user=ALICE, channel=CHANNEL).text


def test_up_in_a_direct_message_is_pointed_at_a_channel(stack, slack):
    reply = slack.slash("up", user=ALICE, channel="D0ALICE")
    assert "Run `/tpu up` in a channel" in reply.text
    assert lease_state(stack, "D0ALICE") is None


def test_a_provision_job_that_cannot_post_gives_the_channel_back_before_any_qr(stack, slack):
    stack.slack.kick(CHANNEL)  # removed without the bot hearing of it: the first post finds out
    assert "Requested a" in slack.slash("up", user=ALICE, channel=CHANNEL).text
    wait_until(lambda: lease_state(stack) is None, what="the lease given back")
    assert stack.tpu_sandbox.queued_resources() == []  # no QR leaked
    dm = wait_until(lambda: dms_to(stack, ALICE), what="the holder told by DM")
    assert "did not go ahead" in dm[0] and "/invite @tpubot" in dm[0]
    # Now the web process knows: the next /tpu up answers at once, and claims nothing.
    assert "/invite @tpubot" in slack.slash("up", user=ALICE, channel=CHANNEL).text
    assert lease_state(stack) is None


def test_losing_the_channel_later_tells_the_holder_once_and_teardown_still_works(stack, slack):
    slack.slash("up", user=ALICE, channel=CHANNEL)
    wait_until(lambda: lease_state(stack) == b"ACTIVE", what="ACTIVE")
    stack.slack.kick(CHANNEL)
    confirm = slack.slash("down", user=ALICE, channel=CHANNEL).json()
    button = next(e for b in confirm["blocks"] if b["type"] == "actions" for e in b["elements"]
                  if e["action_id"] == cards.TEARDOWN_CONFIRM_ACTION)
    click = slack.click(action_id=button["action_id"], value=button["value"], user=ALICE, channel=CHANNEL)
    assert click.status == 200
    wait_until(lambda: stack.tpu_sandbox.queued_resources() == [], what="the QR deleted")
    wait_until(lambda: lease_state(stack) is None, what="the lease released")
    client = redis_sync.Redis.from_url(stack.redis.url)
    try:
        wait_until(lambda: not client.zrange(keys.release_notes(), 0, -1), what="the release finished (hooks ran)")
    finally:
        client.close()
    dms = dms_to(stack, ALICE)
    assert len(dms) == 1 and "can't post in <#C0CONF>" in dms[0]


def test_a_provision_card_confirmed_where_the_bot_was_removed_claims_nothing(stack, slack):
    from dataclasses import asdict

    from redis.asyncio import Redis

    from agent.llm.proposals import Proposal
    from infra.state.feedback import ProposalStore

    async def put_proposal() -> None:
        redis = Redis.from_url(stack.redis.url)
        try:
            card = Proposal(id="p-conf", action="provision", args={}, team=TEAM, channel=CHANNEL, proposed_for=ALICE)
            await ProposalStore(redis).put(card.id, asdict(card))
        finally:
            await redis.aclose()

    asyncio.run(put_proposal())
    bot_left(slack, stack)
    assert slack.click(action_id="proposal_confirm", value="p-conf", user=ALICE, channel=CHANNEL).status == 200
    assert stack.slack.wait_for(lambda: any("/invite @tpubot" in r.get("text", "") for r in stack.slack.responses))
    assert lease_state(stack) is None and stack.tpu_sandbox.queued_resources() == []


def test_a_mention_where_the_bot_cannot_post_is_answered_by_dm(stack, slack):
    stack.slack.kick(PRIVATE)
    assert slack.mention(f"<@{BOT_USER_ID}> what broke?", user=ALICE, channel=PRIVATE).status == 200
    dm = wait_until(lambda: dms_to(stack, ALICE), what="a DM to the person")
    assert "/invite @tpubot" in dm[0]


def test_a_mention_by_another_bot_is_ignored(make_stack):
    stack = make_stack(run_worker=False)
    slack = stack.signed_requests()
    try:
        for event in ({"type": "app_mention", "bot_id": "BOTHER", "text": f"<@{BOT_USER_ID}> hi", "ts": "1700000000.000100",
                       "channel": CHANNEL},
                      {"type": "app_mention", "user": "UOTHERBOT", "bot_id": "BOTHER", "text": f"<@{BOT_USER_ID}> hi",
                       "ts": "1700000000.000200", "channel": CHANNEL},
                      {"type": "app_mention", "user": ALICE, "text": f"<@{BOT_USER_ID}> hi", "ts": "1700000000.000300",
                       "channel": CHANNEL}):
            assert slack.event(event).status == 200
        client = redis_sync.Redis.from_url(stack.redis.url)
        try:
            # process_before_response: a queued answer is in Redis by the time Slack has its 200.
            queued = sorted(k.decode() for k in client.keys("arq:job:mention:*"))
        finally:
            client.close()
        assert queued == [f"arq:job:mention:{TEAM}:{CHANNEL}:1700000000.000300"]  # only the person's
    finally:
        slack.close()


# --- item 2: nothing reaches Slack before the ack ---------------------------------------------


def test_the_web_process_authorizes_at_start_up_so_its_first_request_waits_on_nothing(make_stack):
    stack = make_stack(run_worker=False)
    assert len(stack.slack.calls_to("auth.test")) == 1  # made while the web process started
    slack = SlackRequests(f"{stack.web_url}/slack/events", stack.signing_secret,
                          response_url_factory=stack.slack.response_url, timeout=5)
    gate = stack.slack.hold()
    try:
        assert slack.slash("help", user=ALICE, channel=CHANNEL).status == 200  # Slack held: no call made
    finally:
        gate.set()
        slack.close()
    assert len(stack.slack.calls_to("auth.test")) == 1


def test_no_slack_call_happens_before_any_ack(make_stack):
    """Every Web API call waits while Slack is held: any request whose ack needed one would
    hang past the client's timeout."""
    stack = make_stack(run_worker=False)
    slack = SlackRequests(f"{stack.web_url}/slack/events", stack.signing_secret,
                          response_url_factory=stack.slack.response_url, timeout=5)
    try:
        assert "Requested a" in slack.slash("up", user=ALICE, channel=CHANNEL).text
        confirm = slack.slash("down", user=ALICE, channel=CHANNEL).json()
        buttons = {e["action_id"]: e for b in confirm["blocks"] if b["type"] == "actions" for e in b["elements"]}
        gate = stack.slack.hold()
        try:
            acks = {
                "status": slack.slash("status", user=ALICE, channel=CHANNEL),
                "up elsewhere": slack.slash("up", user=ALICE, channel="C0OTHER"),
                "down": slack.slash("down", user=ALICE, channel=CHANNEL),
                "cancel click": slack.click(action_id=cards.TEARDOWN_CANCEL_ACTION, value="x", user=ALICE,
                                            channel=CHANNEL),
                "confirm click": slack.click(action_id=cards.TEARDOWN_CONFIRM_ACTION,
                                             value=buttons[cards.TEARDOWN_CONFIRM_ACTION]["value"], user=ALICE,
                                             channel=CHANNEL),
                "proposal click": slack.click(action_id="proposal_confirm", value="p-unknown", user=ALICE,
                                              channel=CHANNEL),
                "alert click": slack.click(action_id="alert_ack", value="lease|late", user=ALICE, channel=CHANNEL),
                "mention": slack.mention(f"<@{BOT_USER_ID}> hi", user=ALICE, channel=CHANNEL),
                "home opened": slack.event({"type": "app_home_opened", "user": ALICE, "channel": "D0ALICE",
                                            "tab": "home"}),
                "bot left": slack.event({"type": "member_left_channel", "user": BOT_USER_ID, "channel": "C0GONE",
                                         "channel_type": "C", "team": TEAM}),
            }
        finally:
            gate.set()
        assert {kind: reply.status for kind, reply in acks.items()} == {kind: 200 for kind in acks}
        assert lease_state(stack) == b"TEARING_DOWN"  # the confirm's durable part was done before its ack
    finally:
        slack.close()


# --- item 3: Socket Mode with a token Slack refuses -----------------------------------------


def socket_env(sandbox: SlackApiSandbox, redis_url: str, app_token: str, bot_token: str) -> dict[str, str]:
    """`tpubot socket`'s environment: the sandbox Slack, these tokens and Redis, nothing of ours."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "GCP_", "TPU_", "LOG_"))}
    env.update(SLACK_API_URL=sandbox.base_url, SLACK_APP_TOKEN=app_token, SLACK_BOT_TOKEN=bot_token,
               REDIS_URL=redis_url)
    return env


def run_socket(sandbox: SlackApiSandbox, redis_url: str, app_token: str, bot_token: str) -> subprocess.CompletedProcess:
    env = socket_env(sandbox, redis_url, app_token, bot_token)
    return subprocess.run([str(TPUBOT), "socket"], env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.e2e
@pytest.mark.parametrize("which", ["bot-token-as-app-token", "revoked-app-token", "wrong-bot-token"])
def test_socket_mode_with_a_refused_token_exits_with_one_line_naming_the_fix(sandbox, redis_url, which):
    app_token, bot_token = {
        "bot-token-as-app-token": (sandbox.token, sandbox.token),
        "revoked-app-token": ("xapp-1-revoked", sandbox.token),
        "wrong-bot-token": (sandbox.app_token, "xoxb-wrong"),
    }[which]
    done = run_socket(sandbox, redis_url, app_token, bot_token)
    assert done.returncode != 0
    lines = [line for line in done.stderr.splitlines() if line.strip() and "embedded Redis" not in line]
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    name = "SLACK_BOT_TOKEN" if which == "wrong-bot-token" else "SLACK_APP_TOKEN"
    assert name in lines[0] and ("xapp-" in lines[0] or "xoxb-" in lines[0])
    assert app_token not in lines[0] and bot_token not in lines[0]  # no secret in the message


# --- item 4: Socket Mode stopped by a deploy -------------------------------------------------


@pytest.mark.e2e
def test_socket_mode_stopped_by_sigterm_delivers_the_answer_it_owes_and_exits_0(sandbox, tmp_path):
    """A deploy's SIGTERM while a `/tpu up` acked with "the answer follows" still waits on a stalled
    Redis (a primary paused: handlers/late_answers.py): the process closes its connection (no new
    envelope), finishes the claim once Redis answers, posts the answer, and exits 0. Killed at once,
    the claim was cut and the answer never came."""
    redis = RestartableRedis(free_port(), str(tmp_path / "redis")).start()
    log = tmp_path / "socket.log"
    process = subprocess.Popen([str(TPUBOT), "socket"], env=socket_env(sandbox, redis.url, sandbox.app_token, sandbox.token),
                               stdout=log.open("wb"), stderr=subprocess.STDOUT)
    requests = SlackRequests("(Socket Mode)", "", response_url_factory=sandbox.response_url)
    try:
        wait_until(lambda: sandbox.socket_mode is not None and sandbox.socket_mode.connections == 1, timeout=60,
                   what=lambda: f"the Socket Mode connection; its log: {log.read_text()}")
        socket = sandbox.socket_mode
        help_ = socket.send("slash_commands", dict(parse_qsl(requests.slash_body("help", user=ALICE, channel=CHANNEL))),
                            accepts_response_payload=True)
        assert socket.wait(lambda: help_ in socket.acks, 30), log.read_text()
        assert "/tpu up" in json.dumps(socket.acks[help_]["payload"])  # an answer rides on its ack
        up = dict(parse_qsl(requests.slash_body("up", user=ALICE, channel=CHANNEL)))
        redis.freeze()
        try:
            command = socket.send("slash_commands", up, accepts_response_payload=True)
            assert socket.wait(lambda: command in socket.acks, 30), log.read_text()
            assert "follow" in json.dumps(socket.acks[command].get("payload", {})), socket.acks[command]
            process.send_signal(signal.SIGTERM)
            assert socket.wait(lambda: socket.connections == 0, 30), log.read_text()
            assert process.poll() is None, log.read_text()  # its claim still waits on Redis
        finally:
            redis.thaw()
        assert process.wait(timeout=30) == 0, log.read_text()
        answers = [r for r in sandbox.responses if r["path"] == urlparse(up["response_url"]).path]
        assert len(answers) == 1 and "Requested a" in answers[0]["text"], answers
    finally:
        requests.close()
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)
        redis.stop()
