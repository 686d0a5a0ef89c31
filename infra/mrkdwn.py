"""Text that is not ours — what a person typed, a log line, a model's words — placed in Slack mrkdwn.

Slack's formatting reference (api.slack.com, "Formatting text for app surfaces"): in mrkdwn, `&`,
`<` and `>` are control characters and are escaped as `&amp;`, `&lt;`, `&gt;`, and nothing else
is. Escaped, `<!here>`, `<!channel>`, `<!everyone>`, `<!subteam^…>`, `<@U…>` and `<#C…>` in such
text show as the characters typed and mention nobody; unescaped, Slack renders them.

Slack sends what a person typed already escaped that way (`a < b & c` arrives as
`a &lt; b &amp; c`; only the mentions and links they made arrive as `<…>`), so escaping it again
would show them `&lt;` and `&amp;`. `escape` therefore reads those three entities as the characters
they stand for before escaping: text as Slack sends it shows as it was typed, and so does text of
ours. The one thing given up: a literal `&lt;` in text that did not come from Slack (a log line of
HTML) shows as `<`. Nothing renders either way: no `<` or `>` is ever left unescaped.
"""

from __future__ import annotations

import re

_ENTITY = re.compile(r"&(amp|lt|gt);")
_CHARACTER = {"amp": "&", "lt": "<", "gt": ">"}


def unescape(text: str) -> str:
    """Slack's three entities as the characters they stand for, in one pass (`&amp;lt;` is `&lt;`)."""
    return _ENTITY.sub(lambda entity: _CHARACTER[entity[1]], text) if "&" in text else text


def escape(text: str) -> str:
    """`text` shown as typed in mrkdwn, whether as Slack sent it or as we have it: no mention,
    channel, broadcast or link can render from it, and nothing is escaped twice."""
    return unescape(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def in_code(text: str) -> str:
    """`text` escaped for a `code span`: a backtick in it would end the span, so it shows as `'`."""
    return escape(text).replace("`", "'")
