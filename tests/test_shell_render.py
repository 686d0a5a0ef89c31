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


def test_lines_wrap_at_spaces_to_80_columns_and_never_cut_a_value():
    from rich.cells import cell_len

    from bot.shell import wrap

    qr = "tpubot-" + "0123456789abcdef" * 6  # longer than a row: kept whole on a row of its own
    line = ("                     Valid until: 2026-12-02 18:34 UTC (in 3h59m); still waiting then → FAILED, "
            f"no capacity ⏸ {qr} last")
    rows = wrap(line, 80, 23)
    assert len(rows) > 1
    for row in rows:
        assert cell_len(row) <= 80 or row.strip() == qr, row
    assert rows[0].startswith(line[:20]) and all(row.startswith(" " * 23) for row in rows[1:])
    assert [word for row in rows for word in row.split()] == line.split()  # every word whole, in order
    assert wrap("short", 80, 2) == ["short"] and wrap("", 80, 2) == [""]


def test_bold_is_unwrapped_and_a_digest_variable_keeps_its_star():
    """Issue 29 item 9: answers showed `worker <>` where the digest's legend says `<*>`."""
    from bot.shell import plain

    assert plain("*Log summary*: 2 lines") == "Log summary: 2 lines"
    assert plain('ERROR "worker &lt;*&gt; failed" ×2') == 'ERROR "worker <*> failed" ×2'
    assert plain("`worker &lt;*&gt; on &lt;*&gt;` and *bold*") == "`worker <*> on <*>` and bold"
    assert plain("2 * 3 = 6") == "2 * 3 = 6"


def test_click_prefers_the_button_labelled_as_typed():
    from bot.shell import Button, pick_button

    useful = Button(":+1: Useful", "feedback_up", "v", "1.0", False)
    not_useful = Button(":-1: Not useful", "feedback_down", "v", "1.0", False)
    older = Button("Tear down", "teardown_confirm", "L1", "0.5", True)
    buttons = [older, useful, not_useful]
    assert pick_button(buttons, "Useful") is useful  # not the newer [Not useful], which contains it
    assert pick_button(buttons, "not USEFUL") is not_useful
    assert pick_button(buttons, "tear") is older  # a part of a label still finds it
    assert pick_button(buttons, "Nothing") is None and pick_button(buttons, "") is None


def test_a_direct_message_reads_as_one():
    from bot.shell import conversation

    names = {"UALICE": "alice", "C0SHELL": "tpu-shell"}
    assert conversation("DALICE", names) == "DM to @alice"  # was [#DALICE]
    assert conversation("C0SHELL", names) == "#tpu-shell"
