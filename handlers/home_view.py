"""The App Home tab: the workspace's TPU leases and the zone scoreboard, as one `home` view.

Pure rendering from the `leases` and `zones` action results. Slack caps a Home view at 100
blocks, so the lease list is cut to what fits and the rest is counted, never dropped silently.
"""

from __future__ import annotations

import time

from agent.actions import ActionResult
from agent.actions.workspace_actions import LeaseRows
from handlers import cards
from infra import prices
from infra.state.leases import LeaseState

MAX_HOME_BLOCKS = 100  # Slack's limit for Home tabs and modals (messages: 50)
FIXED_BLOCKS = 4  # header, summary context, divider, and the "… more" context when the list is cut


def money(usd: float | None) -> str:
    return "—" if usd is None else prices.money(usd)


def deadline_text(row: dict, now: float) -> str:
    if row.get("deadline"):
        left = row["deadline"] - now
        when = f"in {cards.duration(left)}" if left > 0 else "passed"
        return f"{cards.clock(row['deadline'])} ({when})"
    return "set when ACTIVE"


def lease_section(row: dict, now: float) -> dict:
    try:
        state = cards.STATE_BADGES.get(LeaseState(row["state"]), row["state"])
    except ValueError:
        state = cards.escape(row["state"])
    return cards.fields_section([
        ("Channel", f"<#{row['channel']}>"),
        ("Holder", f"<@{row['holder']}>"),
        ("State", state),
        ("Zone", cards.escape(row["zone"])),
        ("Deadline", deadline_text(row, now)),
        ("Cost so far", money(row.get("cost_so_far"))),
    ])


def spend_blocks(spend: ActionResult | None) -> list[dict]:
    """The month's spend per channel (the `spend` action's text: a table, never cut mid-row)."""
    if spend is None:
        return []
    text = spend.text if spend.ok else f"Spend: {cards.escape(spend.text)}"
    if len(text) > 3000:  # a section's limit: keep whole rows and say how many were left out
        head, _, rest = text.partition("```")
        table, _, tail = rest.partition("```")
        rows = table.split("\n")
        kept: list[str] = []
        for row in rows:
            if len(head) + sum(len(r) + 1 for r in kept) + len(row) + 120 > 3000:
                break
            kept.append(row)
        text = f"{head}```" + "\n".join(kept) + f"```\n… {len(rows) - len(kept)} more rows: `/tpu spend` lists them all."
    return [{"type": "divider"}, {"type": "section", "text": {"type": "mrkdwn", "text": text}}]


def home_view(leases: ActionResult, zones: tuple[str, list[dict]] | None, now: float | None = None,
              spend: ActionResult | None = None) -> dict:
    """`leases`: the `leases` action's result; `zones`: the zones card's (text, blocks), or None
    when the scoreboard is not available here; `spend`: the `spend` action's result (issue 21), or None."""
    now = now or time.time()
    blocks: list[dict] = [{"type": "header", "text": {"type": "plain_text", "text": "TPUs in this workspace"}}]
    rows = leases.payload.rows if isinstance(leases.payload, LeaseRows) else []
    summary = cards.escape(leases.text) if leases.ok else f":no_entry: {leases.text}"
    blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": cards.truncate(
        f"{summary} Updated {cards.clock(now)}. In a channel: `/tpu up`, `/tpu status`, `/tpu down`, `/tpu help`.",
        3000)}]})
    zone_blocks = zones[1] if zones else [{"type": "context", "elements": [
        {"type": "mrkdwn", "text": "The zone scoreboard is not available in this process."}]}]
    money_blocks = spend_blocks(spend)
    room = MAX_HOME_BLOCKS - FIXED_BLOCKS - len(zone_blocks) - len(money_blocks)
    shown = rows[:room]
    blocks += [lease_section(row, now) for row in shown]
    if len(rows) > len(shown):
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text":
                       f"… and {len(rows) - len(shown)} more leases (oldest first; the Home tab shows at most "
                       f"{len(shown)})."}]})
    blocks.append({"type": "divider"})
    blocks += zone_blocks
    blocks += money_blocks
    return {"type": "home", "blocks": blocks}
