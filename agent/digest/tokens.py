"""Token counting for the digest budget: a calibrated offline estimate, or the model's own
count through vLLM's `/tokenize` route when an endpoint is up.

The estimate follows how Gemma's 262k SentencePiece vocabulary cuts text (measured with
benchmarks/digest_bench.py against the real vocabulary, reference/logs-metrics.md §4.1):

* digits split one per token; punctuation, newlines and non-ASCII characters cost about one each;
* a word costs one token up to WORD_CHARS letters, then one more per EXTRA_CHARS; camelCase
  and `HTTPServer` are cut into their words first (`PacketResponder` is `Packet` + `Responder`);
* a *random-looking* token (base64, hashes, generated ids: many switches between lower case,
  upper case and digits) gets no long pieces: about RANDOM_CHARS letters per token;
* then MARGIN_PERCENT on top, so the estimate stays above the real count (median estimate/real
  1.07, never below 1.0 over 40 digests of all 16 Loghub systems and high-entropy probes).
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import httpx

log = logging.getLogger(__name__)

WORD_CHARS = 6
EXTRA_CHARS = 3
RANDOM_CHARS = 1.5
# A token of at least RANDOM_MIN_CHARS with a class switch per 5 characters is random-looking.
RANDOM_MIN_CHARS = 8
RANDOM_SWITCH_SHARE = 0.2
MARGIN_PERCENT = 3

_TOKEN_RE = re.compile(r"\S+")
_PIECE_RE = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|[^\sA-Za-z]")
_SWITCH_RE = re.compile(r"(?<=[a-z])(?=[A-Z0-9])|(?<=[A-Z])(?=[0-9])|(?<=[0-9])(?=[A-Za-z])|(?<=[A-Z]{2})(?=[a-z])")


def estimate_tokens(text: str) -> int:
    """Estimate, slightly above, of the Gemma token count of `text`."""
    total = text.count("\n")
    for token in _TOKEN_RE.findall(text):
        random_looking = (
            len(token) >= RANDOM_MIN_CHARS and len(_SWITCH_RE.findall(token)) >= RANDOM_SWITCH_SHARE * len(token)
        )
        for piece in _PIECE_RE.findall(token):
            letters = len(piece)
            if letters == 1:
                total += 1
            elif random_looking:
                total += int(-(-letters // RANDOM_CHARS))
            elif letters <= WORD_CHARS:
                total += 1
            else:
                total += 1 + (letters - WORD_CHARS + EXTRA_CHARS - 1) // EXTRA_CHARS
    return total + (total * MARGIN_PERCENT + 99) // 100


class TokenCounter(Protocol):
    """Anything that can count the tokens of a text for the digest budget."""

    exact: bool

    def count(self, text: str) -> int: ...


class EstimatedTokens:
    """The offline estimate as a TokenCounter."""

    exact = False

    def count(self, text: str) -> int:
        return estimate_tokens(text)


class VLLMTokenizer:
    """Exact counts from a vLLM OpenAI-compatible server's `POST /tokenize`.

    `base_url` may be the OpenAI base (`http://host:8000/v1`): `/tokenize` lives at the server
    root. Any failure (server down, route missing, timeout) falls back to the estimate for that
    call and flips `exact` to False so callers can say the count is an estimate.
    """

    def __init__(self, base_url: str, model: str, *, timeout: float = 5.0, client: httpx.Client | None = None):
        root = base_url.rstrip("/")
        if root.endswith("/v1"):
            root = root[: -len("/v1")]
        self.url = f"{root}/tokenize"
        self.model = model
        self.exact = True
        self.max_model_len: int | None = None
        import httpx  # here, not at the top: it is 18 MB of a streaming `tpubot digest`'s memory

        self._http_errors = (httpx.HTTPError,)
        self._client = client or httpx.Client(timeout=timeout)

    def count(self, text: str) -> int:
        try:
            response = self._client.post(self.url, json={"model": self.model, "prompt": text})
            response.raise_for_status()
            body = response.json()
            self.max_model_len = body.get("max_model_len", self.max_model_len)
            return int(body["count"])
        except (*self._http_errors, ValueError, KeyError, TypeError) as exc:
            if self.exact:
                log.warning("tokenize at %s failed (%s); using the offline estimate", self.url, exc)
            self.exact = False
            return estimate_tokens(text)
