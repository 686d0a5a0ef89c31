"""Text that is not ours — what a person typed, a log line, a model's words — placed in Slack mrkdwn.

Slack's formatting reference (api.slack.com, "Formatting text for app surfaces"): in mrkdwn, `&`,
`<` and `>` are control characters and are escaped as `&amp;`, `&lt;`, `&gt;`, and nothing else
is. Escaped, `<!here>`, `<!channel>`, `<!everyone>`, `<!subteam^…>`, `<@U…>` and `<#C…>` in such
text show as the characters typed and mention nobody; unescaped, Slack renders them.
"""

from __future__ import annotations


def escape(text: str) -> str:
    """`text` shown as typed in mrkdwn: no mention, channel, broadcast or link can render from it."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def in_code(text: str) -> str:
    """`text` escaped for a `code span`: a backtick in it would end the span, so it shows as `'`."""
    return escape(text).replace("`", "'")
