"""How `tpubot shell` prints what the bot posts: emoji as symbols, tables without fences, pastes
summarized. Pure functions of bot/shell.py, no stack."""

from __future__ import annotations

import re
from pathlib import Path

from bot.shell import HELP_LINES, paste_summary, render
from handlers.cards import STATE_BADGES, zones_card

ROOT = Path(__file__).resolve().parents[1]
# Slack emoji the bot posts: `:name:` inside string literals of the Slack-facing packages.
SHORTCODE = re.compile(r"(?<![\w:]):([a-z][a-z0-9_+]*):(?![\w:])")


def posted_shortcodes() -> set[str]:
    found = set()
    for package in ("handlers", "agent"):
        for path in (ROOT / package).rglob("*.py"):
            found |= {f":{name}:" for name in SHORTCODE.findall(path.read_text(encoding="utf-8"))}
    return {code for code in found if "_" in code or code.strip(":") in {
        "warning", "lock", "receipt", "gear", "rocket", "broom", "bell", "stopwatch", "wastebasket"}}


def test_every_emoji_the_bot_posts_is_rendered_as_a_symbol():
    codes = posted_shortcodes()
    assert ":stopwatch:" in codes and ":white_check_mark:" in codes
    for code in codes:
        assert code not in render(f"{code} text", None)[0], code


def test_scoreboard_is_a_table_not_a_code_fence():
    text, blocks = zones_card([{"zone": "us-west4-a", "last_outcome": "active", "offers": True, "last_at": None,
                                "median_seconds_to_active": 125, "skipped_until": None, "search_rank": 1}],
                              ["us-west4-a"])
    lines = render(text, blocks)
    assert not any("```" in line for line in lines)
    assert any(line.startswith("zone") and "last outcome" in line for line in lines)
    assert any(line.startswith("1. us-west4-a") and "2m5s" in line for line in lines)


def test_one_spelling_per_state():
    for badge in STATE_BADGES.values():
        assert "_" not in badge.split(" ", 1)[1]


def test_paste_summary():
    assert paste_summary("@tpubot why\nL1\nL2") == ["@tpubot why", "L1", "L2"]
    body = "@tpubot why\n" + "\n".join(f"line {i}" for i in range(12345))
    assert paste_summary(body) == ["@tpubot why", "[pasted 12,345 lines]"]
    long_line = "@tpubot " + "x" * 5000
    assert paste_summary(long_line)[0].endswith("[+4,708 characters]")


def test_help_lists_every_shell_command():
    listed = {line.split()[0] for line in HELP_LINES}
    assert {"!click", "!user", "!wait", "!kick", "!invite", "!help", "!quit"} <= listed


def test_mentions_read_as_slack_shows_them():
    names = {"UALICE": "alice", "C0SHELL": "tpu-shell"}
    assert render("<@UALICE> in <#C0SHELL>, <#C0OTHER|general> and <#C0GONE>; <@UNKNOWN>", None, names) == [
        "@alice in #tpu-shell, #general and #C0GONE; @UNKNOWN"]
