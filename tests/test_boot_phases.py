"""A boot you can watch (issues 28, 40): the VM's phases on the card before READY, a crash loop FAILED
in seconds with its error line and fix, and a second lease's boot warm from XLA_CACHE_BUCKET.

Driven in-process (tests/in_process_bot.py): signed `/tpu up` into the bolt app, the worker, the
sandbox TPU VM running the real startup script (its guest-attribute writes are the phases), the
worker's real TPU client reading them back (`nodes.getGuestAttributes`), the Slack stand-in's cards.
"""

from __future__ import annotations

import re

import pytest

from handlers import cards
from infra.vllm_flags import DEFAULT_IMAGE
from infra.vllm_startup_errors import SHARED_KV_ASSERTION, classify_startup_error, crash_loop_explanation

CHANNEL = "C0BOOT"

def card_bodies(stack) -> list[dict]:
    return [c.body for c in stack.slack.calls if c.method in ("chat.postMessage", "chat.update")]


def first_card(stack, word: str) -> dict | None:
    return next((b for b in card_bodies(stack) if word in b["text"]), None)


def test_the_card_shows_the_vms_boot_phases_before_ready_and_a_cold_boot(make_bot):
    # A VM clock three times slower than the default: the compile phase lasts 3 s of wall time, so a
    # loaded machine (the watcher on the VM and the bot's poll each take real time) still sees it.
    bot = make_bot(poll_interval="0.2s", sandbox_time_scale=3.0)
    slack = bot.signed_requests()
    slack.slash("up", user="UALICE", channel=CHANNEL)
    ready = bot.until(lambda: first_card(bot, "READY"))
    bodies = card_bodies(bot)
    before = [str(b["blocks"]) for b in bodies[: bodies.index(ready)]]
    phases = {name for name in cards.BOOT_PHASE_NAMES.values() if any(f"*Boot phase*\\n{name} for " in b
                                                                     for b in before)}
    assert cards.BOOT_PHASE_NAMES["compiling"] in phases and len(phases) >= 2, phases
    # No XLA_CACHE_BUCKET: the card says the cache is off, and why (the VM's own note).
    assert any(cards.BOOT_CACHE_NAMES["off"] + ": XLA_CACHE_BUCKET is not set" in b for b in before)
    assert "*Boot*\\n" + cards.BOOT_CACHE_NAMES["off"] in str(ready["blocks"])
    # What the bot read is what the node published, through getGuestAttributes (checked against Google's document).
    assert "tpu.projects.locations.nodes.getGuestAttributes" in bot.tpu_sandbox.apis["v2"].checked
    assert bot.tpu_sandbox.rejected == [] and bot.tpu_sandbox.response_problems == []
    status = slack.slash("status", user="UALICE", channel=CHANNEL).json()
    assert cards.BOOT_CACHE_NAMES["off"] in str(status["blocks"])
    slack.close()


def test_a_crash_looping_vllm_fails_the_lease_in_seconds_with_its_error_line_and_the_image_to_use(make_bot):
    bot = make_bot(poll_interval="0.2s")  # model_boot_timeout stays 60 minutes
    bot.node_models.crash_loop = SHARED_KV_ASSERTION  # what vllm-tpu v0.19.0 does with Gemma 4 E2B
    slack = bot.signed_requests()
    slack.slash("up", user="UALICE", channel=CHANNEL)
    failed = bot.until(lambda: first_card(bot, "FAILED"))
    blocks = str(failed["blocks"])
    # At least the second crash; a slow poll (a loaded machine) may see a later one first.
    crashes = re.search(r"vLLM crashed (\d+) times at start-up", blocks)
    assert crashes and int(crashes.group(1)) >= 2, blocks
    assert f"`{SHARED_KV_ASSERTION}`" in blocks  # the VM's own error line
    assert f"*Fix:* set VLLM_IMAGE={DEFAULT_IMAGE}" in blocks
    assert cards.BOOT_PHASE_NAMES["crashed"] in blocks or cards.BOOT_PHASE_NAMES["loading-weights"] in blocks
    assert not any("READY" in b["text"] for b in card_bodies(bot))
    status = slack.slash("status", user="UALICE", channel=CHANNEL).json()
    assert SHARED_KV_ASSERTION in str(status["blocks"])
    slack.close()


def test_a_second_lease_after_teardown_boots_warm_from_the_bucket_and_the_card_says_so(make_bot):
    bot = make_bot(poll_interval="0.2s", xla_cache_bucket="tpubot-sandbox-cache")
    slack = bot.signed_requests()
    slack.slash("up", user="UALICE", channel=CHANNEL)
    first = bot.until(lambda: first_card(bot, "READY"))
    assert cards.BOOT_CACHE_NAMES["cold"] in str(first["blocks"])
    lease_id = bot.tpu_sandbox.queued_resources()[0]["labels"]["tpubot-lease"]
    slack.slash("down", user="UALICE", channel=CHANNEL)
    slack.click(action_id=cards.TEARDOWN_CONFIRM_ACTION, value=lease_id, user="UALICE", channel=CHANNEL,
                label="Tear down")
    bot.until(lambda: first_card(bot, "released"))
    seen = len(card_bodies(bot))
    slack.slash("up", user="UALICE", channel=CHANNEL)
    second = bot.until(lambda: next((b for b in card_bodies(bot)[seen:] if "READY" in b["text"]), None))
    assert cards.BOOT_CACHE_NAMES["warm"] in str(second["blocks"])
    status = slack.slash("status", user="UALICE", channel=CHANNEL).json()
    assert cards.BOOT_CACHE_NAMES["warm"] in str(status["blocks"])
    # The cache was saved once, after the first READY, under one key; the warm boot was the shorter.
    from bot.wiring import startup_script_config_from
    from infra.startup_script import compile_cache_key

    key = compile_cache_key(startup_script_config_from(bot.settings))
    assert bot.cloud.compile_caches == {f"gs://tpubot-sandbox-cache/{key}"}
    (cold, cold_s), (warm, warm_s) = bot.node_models.boots
    assert (cold, warm) == ("cold", "warm") and warm_s < cold_s
    slack.close()


def test_no_bucket_means_every_boot_is_cold(make_bot):
    bot = make_bot(poll_interval="0.2s")
    slack = bot.signed_requests()
    slack.slash("up", user="UALICE", channel=CHANNEL)
    bot.until(lambda: first_card(bot, "READY"))
    assert bot.cloud.compile_caches == set() and [cache for cache, _ in bot.node_models.boots] == ["cold"]
    slack.close()


@pytest.mark.parametrize(("line", "name"), [
    ("AssertionError: Expect no shared layers", "shared-kv-layers"),
    ("    assert self.num_kv_shared_layers == 0", "shared-kv-layers"),
    ("huggingface_hub.errors.GatedRepoError: 403 Client Error", "gated-model"),
    ("jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Attempting to allocate 3.2G", "out-of-memory"),
    ("vllm: error: unrecognized arguments: --disable_chunked_mm_input", "unknown-flag"),
    ("Segmentation fault (core dumped)", None),
])
def test_known_start_up_errors_are_one_table(line, name):
    known = classify_startup_error(line)
    assert (known.name if known else None) == name
    reason, fix = crash_loop_explanation(line, 2, node="n", zone="z")
    assert line.strip() in reason and "2 times" in reason
    assert fix == known.fix if known else "docker logs" in fix and "--zone z" in fix


def test_a_crash_loop_is_two_crashes_without_getting_past_loading_the_model():
    from agent.lease.model_boot import is_crash_loop
    from infra import boot_phases as bp

    looping = [bp.BootReport(phase=bp.CRASHED, restarts=2), bp.BootReport(phase=bp.LOADING_WEIGHTS, restarts=3)]
    going_on = [bp.BootReport(phase=bp.CRASHED, restarts=1), bp.BootReport(phase=bp.COMPILING, restarts=2),
                bp.BootReport(phase=bp.SERVING, restarts=4), bp.BootReport()]
    assert [is_crash_loop(r) for r in looping + going_on] == [True, True, False, False, False, False]
