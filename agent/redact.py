"""Secret redaction for anything that leaves the bot: digests, model prompts, Slack replies.

`redact(text)` replaces credentials with `[REDACTED:<kind>]` and keeps the surrounding text, so a
log line stays readable (`password=[REDACTED:password]`). Patterns are deliberately greedy on
the secret and conservative on context: a false positive costs a few characters of log, a
false negative leaks a token into a Slack channel or a model prompt.

Besides the shapes of well-known tokens, a value is redacted by the NAME it is given: any name
ending in key, secret or token, or containing password (`VLLM_API_KEY=…`, `"apiKey": "…"`,
`'api_key': ['…']` as vLLM logs its start-up args, `api_key: …` in YAML, `--api-key …` on a
command line). A signing secret or a lease's model key has no recognisable shape, so a
`Redactor` also knows the literal values a run must never show (bot/wiring.py gives it the
deployment's own secrets; agent/actions/model_endpoint.py adds every live lease's model key per run).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator

# (kind, pattern, replacement, the lowercase pieces one of which any match contains: `redact` runs
# a rule's regex only on text holding one)
_RULES: tuple[tuple[str, re.Pattern[str], str, tuple[str, ...]], ...] = (
    # PEM private keys (RSA, EC, OPENSSH, ENCRYPTED, plain PKCS#8), possibly cut off at the end.
    (
        "private-key",
        re.compile(
            r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----.*?(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----|\Z)",
            re.S,
        ),
        "[REDACTED:private-key]",
        ("private key",),
    ),
    # Slack bot/user/app/refresh tokens and app-level tokens.
    ("slack-token", re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{8,}"), "[REDACTED:slack-token]", ("xox",)),
    ("slack-app-token", re.compile(r"\bxapp-[A-Za-z0-9-]{8,}"), "[REDACTED:slack-token]", ("xapp-",)),
    # `Authorization: Bearer …` / `Basic …` headers, and bare `Bearer <token>`.
    (
        "authorization",
        # Not a marker a first pass left (redaction runs at intake and again on output), and not
        # the backtick that closes a Slack code span around the header.
        re.compile(r"(?i)(\bauthorization\s*[:=]\s*[\"']?(?:bearer|basic|token)\s+)(?!\[REDACTED)[^\s\"'`,;]+"),
        r"\1[REDACTED:token]",
        ("authorization",),
    ),
    ("bearer", re.compile(r"(?i)(\bbearer\s+)[A-Za-z0-9._~+/=-]{8,}"), r"\1[REDACTED:token]", ("bearer",)),
    # Provider API keys: OpenAI/Anthropic-style sk-…, Google AIza…, Hugging Face hf_…, GitHub, AWS.
    ("api-key", re.compile(r"\bsk-(?:[A-Za-z0-9_-]{16,})"), "[REDACTED:api-key]", ("sk-",)),
    ("google-api-key", re.compile(r"\bAIza[0-9A-Za-z_-]{30,}"), "[REDACTED:api-key]", ("aiza",)),
    ("hf-token", re.compile(r"\bhf_[A-Za-z0-9]{20,}"), "[REDACTED:api-key]", ("hf_",)),
    ("github-token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})"), "[REDACTED:api-key]",
     ("gh", "github_pat_")),
    ("aws-access-key", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), "[REDACTED:api-key]", ("akia", "asia")),
    # Passwords inside URLs: scheme://user:password@host
    (
        "url-password",
        re.compile(r"\b([a-zA-Z][a-zA-Z0-9+.-]*://[^\s:/@]+:)[^\s@/]+(@)"),
        r"\1[REDACTED:password]\2",
        ("://",),
    ),
    # Signed URLs (Cloud Storage V4, S3 presigned, CloudFront, Azure SAS): whoever holds the URL
    # holds the object until it expires, so the signature goes; the rest of the URL stays readable.
    (
        "url-signature",
        re.compile(r"(?i)([?&](?:x-goog-signature|x-amz-signature|signature|sig)=)(?!\[REDACTED)[^&\s\"'`<>]+"),
        r"\1[REDACTED:signature]",
        ("sig",),
    ),
    # JSON Web Tokens: three base64url segments, the header's `{"` encoded as eyJ (the signature
    # may be empty: alg "none").
    ("jwt", re.compile(r"\beyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*"), "[REDACTED:jwt]", ("eyj",)),
)

# A name before `=` or `:` (env, JSON, YAML, Python repr), its closing quote included; not the
# tail of a longer name or flag word (`--api-key=` still counts: `-` may precede a name).
_ASSIGNMENT = re.compile(r"(?<![A-Za-z0-9_.])(?P<name>[A-Za-z_][A-Za-z0-9_.-]*)(?:\\?[\"'])?[ \t]*[:=][ \t]*")
# A command-line flag and its value after a space: `--api-key X`, `--password X`, `--token X`.
_FLAG = re.compile(r"(?<![A-Za-z0-9_-])--(?P<name>[A-Za-z][A-Za-z0-9-]*)[ \t]+(?!-)")
_WORDS = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")
_BARE_END = re.compile(r"[\s\"'`,;&)}\]\\]")


def secret_kind(name: str) -> str | None:
    """The marker kind of a secret's NAME (`VLLM_API_KEY` → api-key), or None for an ordinary name.
    Words split at `_ . -` and camelCase; `key` alone is too common a name (a cache key) to count."""
    words = [w.lower() for w in _WORDS.findall(name)]
    if not words:
        return None
    if any("password" in w or "passwd" in w for w in words) or words[-1] == "pwd":
        return "password"
    last = words[-1]
    if last == "secret":
        return "secret"
    if last == "token":
        return "token"
    if last == "apikey" or (last == "key" and len(words) > 1):
        return "api-key"
    return None


def _value_span(text: str, start: int) -> tuple[int, int] | None:
    """Where the value at `start` is, quotes and brackets excluded: (begin, end), or None for no
    value (nothing, a marker a first pass left, a nested object)."""
    if start >= len(text) or text.startswith("[REDACTED", start) or text[start] in "{\n":
        return None
    line_end = text.find("\n", start)
    line_end = len(text) if line_end < 0 else line_end
    for opening in ('\\"', "\\'", '"', "'"):  # an escaped quote (JSON inside a string) first
        if text.startswith(opening, start):
            begin = start + len(opening)
            if text.startswith("[REDACTED", begin):
                return None
            close = text.find(opening, begin, line_end)
            end = line_end if close < 0 else close  # unclosed (a line cut off): to the end of the line
            return (begin, end) if end > begin else None
    if text[start] == "[":  # a list, as Python prints vLLM's `api_key`: ['…']
        close = text.find("]", start, line_end)
        return start, line_end if close < 0 else close + 1
    found = _BARE_END.search(text, start, line_end)
    end = line_end if found is None else found.start()
    return (start, end) if end > start else None


def _redact_named(pattern: re.Pattern[str], text: str) -> str:
    out, at = [], 0
    for match in pattern.finditer(text):
        if match.start() < at:
            continue
        kind = secret_kind(match["name"])
        span = _value_span(text, match.end()) if kind else None
        if span is None:
            continue
        out += [text[at:span[0]], f"[REDACTED:{kind}]"]
        at = span[1]
    return "".join(out) + text[at:] if out else text


_PEM_BEGIN = re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----")
_PEM_END = re.compile(r"-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----")
KEY_MARKER = "[REDACTED:private-key]"
# Shorter than this, a "secret" is more likely a test placeholder that also occurs in ordinary words.
MIN_LITERAL_SECRET = 8


# The only letters outside ASCII that re's IGNORECASE matches for an ASCII one (found by trying
# every code point against each of a-z); `lower()` alone would leave them, or make two of İ.
_CASE_BLIND_ASCII = str.maketrans({"\u0130": "i", "\u0131": "i", "\u017f": "s", "\u212a": "k"})


def _folded(text: str) -> str:
    """`text` as a rule's pieces are looked for in it: lowercase, with every letter a case-blind
    pattern would take for an ASCII one made that letter."""
    return (text if text.isascii() else text.translate(_CASE_BLIND_ASCII)).lower()


# Any rule's piece: most log lines hold none, and one scan for them all costs less than one rule's regex.
_ANY_PIECE = re.compile("|".join(re.escape(piece) for *_, pieces in _RULES for piece in pieces))
# Where a secret's name can be, in folded text: `passw` anywhere in it, or its last word (`secret_kind`)
# ending it, before the `=` or `:` of an assignment or the space after a flag (a name may end in
# `_ . -`). A word alone is not enough: every vLLM metrics line says `tokens/s`.
_SECRET_NAME_END = re.compile(r"passw|(?:key|secret|token|pwd)(?:[_.-]*(?:\\?[\"'])?[ \t]*[:=]|-*[ \t])")


def _redact_shapes(text: str, folded: str) -> str:
    """The rules' shapes of secrets, each rule's regex run only on text holding one of its pieces."""
    for _, pattern, replacement, pieces in _RULES:
        if any(piece in folded for piece in pieces):
            replaced = pattern.sub(replacement, text)
            if replaced != text:
                text, folded = replaced, _folded(replaced)
    return text


def redact(text: str) -> str:
    """Return `text` with secrets replaced by `[REDACTED:<kind>]` markers."""
    folded = _folded(text)
    if _ANY_PIECE.search(folded):
        text = _redact_shapes(text, folded)
        folded = _folded(text)
    if _SECRET_NAME_END.search(folded) is None:
        return text
    return _redact_named(_FLAG, _redact_named(_ASSIGNMENT, text))


def redact_lines(lines: list[str]) -> list[str]:
    """`redact` per line, with PEM private keys spanning lines blanked out line by line."""
    return list(redact_stream(lines))


def redact_stream(lines: Iterable[str], redact_line: Callable[[str], str] = redact) -> Iterator[str]:
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
        yield redact_line(line)


class Redactor:
    """`redact`, then the literal secret values it was given (longest first, so a secret that
    contains another is replaced whole). Built per process from the settings and per agent run
    with the live lease keys; callable like `redact`."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._literals = tuple(sorted({s for s in secrets if s and len(s) >= MIN_LITERAL_SECRET},
                                      key=len, reverse=True))

    def __call__(self, text: str) -> str:
        text = redact(text)
        for secret in self._literals:
            text = text.replace(secret, "[REDACTED:secret]")
        return text

    def lines(self, lines: Iterable[str]) -> list[str]:
        return list(self.stream(lines))

    def stream(self, lines: Iterable[str]) -> Iterator[str]:
        return redact_stream(lines, self)

    def with_secrets(self, more: Iterable[str]) -> "Redactor":
        """This redactor and `more` literal values (the live lease keys of a run)."""
        return Redactor((*self._literals, *more))
