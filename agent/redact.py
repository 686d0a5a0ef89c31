"""Secret redaction for anything that leaves the bot: digests, model prompts, Slack replies.

`redact(text)` replaces credentials with `[REDACTED:<kind>]` and keeps the surrounding text, so a
log line stays readable (`password=[REDACTED:password]`). Patterns are deliberately greedy on
the secret and conservative on context: a false positive costs a few characters of log, a
false negative leaks a token into a Slack channel or a model prompt.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

_RULES: tuple[tuple[str, re.Pattern[str], str], ...] = (
    # PEM private keys (RSA, EC, OPENSSH, ENCRYPTED, plain PKCS#8), possibly cut off at the end.
    (
        "private-key",
        re.compile(
            r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----.*?(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----|\Z)",
            re.S,
        ),
        "[REDACTED:private-key]",
    ),
    # Slack bot/user/app/refresh tokens and app-level tokens.
    ("slack-token", re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{8,}"), "[REDACTED:slack-token]"),
    ("slack-app-token", re.compile(r"\bxapp-[A-Za-z0-9-]{8,}"), "[REDACTED:slack-token]"),
    # `Authorization: Bearer …` / `Basic …` headers, and bare `Bearer <token>`.
    (
        "authorization",
        # Not a marker a first pass left (redaction runs at intake and again on output), and not
        # the backtick that closes a Slack code span around the header.
        re.compile(r"(?i)(\bauthorization\s*[:=]\s*[\"']?(?:bearer|basic|token)\s+)(?!\[REDACTED)[^\s\"'`,;]+"),
        r"\1[REDACTED:token]",
    ),
    ("bearer", re.compile(r"(?i)(\bbearer\s+)[A-Za-z0-9._~+/=-]{8,}"), r"\1[REDACTED:token]"),
    # Provider API keys: OpenAI/Anthropic-style sk-…, Google AIza…, Hugging Face hf_…, GitHub, AWS.
    ("api-key", re.compile(r"\bsk-(?:[A-Za-z0-9_-]{16,})"), "[REDACTED:api-key]"),
    ("google-api-key", re.compile(r"\bAIza[0-9A-Za-z_-]{30,}"), "[REDACTED:api-key]"),
    ("hf-token", re.compile(r"\bhf_[A-Za-z0-9]{20,}"), "[REDACTED:api-key]"),
    ("github-token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})"), "[REDACTED:api-key]"),
    ("aws-access-key", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), "[REDACTED:api-key]"),
    # Passwords inside URLs: scheme://user:password@host
    (
        "url-password",
        re.compile(r"\b([a-zA-Z][a-zA-Z0-9+.-]*://[^\s:/@]+:)[^\s@/]+(@)"),
        r"\1[REDACTED:password]\2",
    ),
    # password=…, passwd: …, secret=…, api_key=…, token=… (key-value style, also JSON "key": "value").
    (
        "password",
        re.compile(
            r"(?i)(\b(?:password|passwd|pwd|secret|client_secret|api[_-]?key|access[_-]?token|auth[_-]?token)"
            r"[\"']?\s*[:=]\s*[\"']?)(?!\[REDACTED)[^\s\"',;&]+"
        ),
        r"\1[REDACTED:password]",
    ),
)

_PEM_BEGIN = re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----")
_PEM_END = re.compile(r"-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----")
KEY_MARKER = "[REDACTED:private-key]"


def redact(text: str) -> str:
    """Return `text` with secrets replaced by `[REDACTED:<kind>]` markers."""
    for _, pattern, replacement in _RULES:
        text = pattern.sub(replacement, text)
    return text


def redact_lines(lines: list[str]) -> list[str]:
    """`redact` per line, with PEM private keys spanning lines blanked out line by line."""
    return list(redact_stream(lines))


def redact_stream(lines: Iterable[str]) -> Iterator[str]:
    """`redact_lines` as lines arrive: one line out per line in, nothing kept but whether a key is open."""
    in_key = False
    for line in lines:
        if in_key:
            if _PEM_END.search(line):
                in_key = False
            yield KEY_MARKER
            continue
        if _PEM_BEGIN.search(line) and not _PEM_END.search(line):
            in_key = True
            yield _PEM_BEGIN.split(line, 1)[0] + KEY_MARKER
            continue
        yield redact(line)
