"""`/tpu spend` in Slack: the table split over as many sections as it needs (a section holds 3000
characters), at row boundaries, each part its own code block — no row is ever cut."""

from __future__ import annotations

SECTION_LIMIT = 3000
MAX_SECTIONS = 45  # a message holds 50 blocks


def spend_sections(text: str) -> list[dict]:
    head, fence, rest = text.partition("```")
    if not fence or len(text) <= SECTION_LIMIT:
        return [{"type": "section", "text": {"type": "mrkdwn", "text": text[:SECTION_LIMIT]}}]
    table, _, tail = rest.partition("```")
    rows = table.split("\n")
    header, rows = rows[0], rows[1:]
    parts: list[list[str]] = [[]]
    for row in rows:
        size = sum(len(r) + 1 for r in parts[-1]) + len(header) + len(row) + 8
        if parts[-1] and size > SECTION_LIMIT:
            parts.append([])
        parts[-1].append(row)
    blocks: list[dict] = [{"type": "section", "text": {"type": "mrkdwn", "text": head.strip() or " "}}]
    for part in parts[:MAX_SECTIONS]:
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": "```" + "\n".join([header, *part]) + "```"}})
    if len(parts) > MAX_SECTIONS:
        left = sum(len(p) for p in parts[MAX_SECTIONS:])
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text":
                       f"… {left} more rows: `tpubot spend --json` lists them all."}]})
    if tail.strip():
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": tail.strip()[:SECTION_LIMIT]}})
    return blocks
