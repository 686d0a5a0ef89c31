"""What a request to /slack/events must pass before any of it is parsed, logged or acted on.

The body is read under a cap (Slack's payloads are a few KB; a 50 MB POST must not cost 50 MB
of memory or of logs), and the signature is checked here, over the raw bytes, with the same
rules as slack_sdk's SignatureVerifier and the same 401 as bolt's RequestVerification. Doing it
here, not in bolt, matters three ways: slack_sdk raises on a timestamp that is not an integer
and on a body that is not UTF-8 (a 5xx); bolt logs the whole body of every badly signed request
at INFO; and a badly signed request then never reaches a listener, so it writes nothing.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import re
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from starlette.requests import Request

# slack_sdk's SignatureVerifier: a request more than 5 minutes old (or ahead) is a replay.
MAX_CLOCK_SKEW_SECONDS = 60 * 5
# "v0=" and 64 hex digits; a Unix time in seconds. Anything else is not Slack's.
SIGNATURE = re.compile(r"v0=[0-9a-f]{64}")
TIMESTAMP = re.compile(r"[0-9]{1,12}")
SIGNED_HEADERS = (b"x-slack-signature", b"x-slack-request-timestamp")


@dataclass(frozen=True)
class Refusal:
    status: int
    error: str


class BodyTooLarge(Exception):
    pass


async def read_capped_body(request: Request, limit: int) -> bytes:
    """The body, or BodyTooLarge as soon as it is known to exceed `limit` (Content-Length first,
    then counted while streaming, for a chunked body or a lying length)."""
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > limit):
        raise BodyTooLarge
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge
        chunks.append(chunk)
    return b"".join(chunks)


def signature_refusal(raw_headers: list[tuple[bytes, bytes]], body: bytes, secret: str,
                      now: float | None = None) -> Refusal | None:
    """None when the request is signed by `secret`; else the 401 bolt gives a bad signature.

    Exactly one of each signed header, in Slack's shapes: a repeated header is ambiguous
    (which one did the signer mean?), so it is refused rather than guessed.
    """
    values: dict[bytes, list[bytes]] = {name: [] for name in SIGNED_HEADERS}
    for name, value in raw_headers:
        if name.lower() in values:
            values[name.lower()].append(value)
    if any(len(found) != 1 for found in values.values()) or not secret:
        return Refusal(401, "invalid request")
    signature, timestamp = (values[name][0].decode("latin-1") for name in SIGNED_HEADERS)
    if not SIGNATURE.fullmatch(signature) or not TIMESTAMP.fullmatch(timestamp):
        return Refusal(401, "invalid request")
    if abs((time.time() if now is None else now) - int(timestamp)) > MAX_CLOCK_SKEW_SECONDS:
        return Refusal(401, "invalid request")
    expected = hmac.new(secret.encode(), b"v0:" + timestamp.encode() + b":" + body, hashlib.sha256).hexdigest()
    if not hmac.compare_digest("v0=" + expected, signature):
        return Refusal(401, "invalid request")
    return None


def encoding_refusal(body: bytes) -> Refusal | None:
    """Slack sends UTF-8 only; bolt decodes the body as such and would raise on anything else."""
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        return Refusal(400, "malformed request: the body is not UTF-8")
    return None


def response_url_allowed(url: object, hosts: list[str] | tuple[str, ...]) -> bool:
    """True for an https URL on one of `hosts` (`host` or `host:port`); a loopback host may be http
    (the sandbox's Slack stand-in)."""
    if not isinstance(url, str):
        return False
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return False
    host = (parts.hostname or "").lower()
    where = f"{host}:{port}" if port else host
    if host not in hosts and where not in hosts:
        return False
    return parts.scheme == "https" or (parts.scheme == "http" and _loopback(host))


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
