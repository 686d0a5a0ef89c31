"""How each alert source proves a webhook is its own (issue 32), checked over the raw request
before any of the body is parsed.

- Alertmanager: its `webhook_config` sends `http_config.authorization` (`Authorization: Bearer
  <token>`, type Bearer by default) or `basic_auth` (the password is the token); where neither
  can be set, the token may ride in the URL as `?token=`.
- Cloud Monitoring: a webhook channel's token authentication puts it in the URL (`?auth_token=`);
  its basic-auth channel sends `Authorization: Basic` (the password is the token).
- PagerDuty v3: `X-PagerDuty-Signature: v1=<hex HMAC-SHA256 of the raw body>`, one per signing
  secret, comma-separated during a rotation; any one matching is enough (PagerDuty's
  "Verifying Signatures" page). The signature carries no time, so a replayed delivery is caught
  by its event id instead (bot/alert_webhooks.py), and by the `X-Webhook-Id` header PagerDuty
  repeats on every attempt of one webhook ("At-Least-Once Delivery" on its "Behavior" page).

A refusal carries a Basic challenge (`WWW-Authenticate`): Cloud Monitoring's basic-auth channel
sends its credentials only after a 401 that asks for them (Google's notification-channel page).

Every comparison is constant-time; a header given twice is refused rather than guessed; no
credential, header or body is logged.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re

from starlette.requests import Request

PAGERDUTY_SIGNATURE = re.compile(r"v1=[0-9a-f]{64}")
MAX_SIGNATURES = 8
BASIC_CHALLENGE = 'Basic realm="tpubot alerts", charset="UTF-8"'
WEBHOOK_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")


def _one_header(request: Request, name: str) -> str | None:
    """The header's value when it is sent exactly once; None when absent or repeated."""
    values = request.headers.getlist(name)
    return values[0] if len(values) == 1 else None


def _same(given: str, expected: str) -> bool:
    return bool(expected) and hmac.compare_digest(given.encode(), expected.encode())


def _basic_password(authorization: str) -> str | None:
    scheme, _, encoded = authorization.partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    _, colon, password = decoded.partition(":")
    return password if colon else None


def token_ok(request: Request, token: str, *, query_names: tuple[str, ...], bearer: bool) -> bool:
    """A shared token, sent as a Bearer header (if `bearer`), a basic-auth password, or a URL query parameter."""
    if not token:
        return False
    authorization = request.headers.getlist("authorization")
    if len(authorization) > 1:
        return False
    if authorization:
        value = authorization[0]
        scheme, _, credential = value.partition(" ")
        if bearer and scheme.lower() == "bearer":
            return _same(credential.strip(), token)
        password = _basic_password(value)
        return password is not None and _same(password, token)
    for name in query_names:
        given = request.query_params.getlist(name)
        if len(given) == 1:
            return _same(given[0], token)
    return False


def pagerduty_ok(request: Request, body: bytes, secret: str) -> bool:
    header = _one_header(request, "x-pagerduty-signature")
    if not secret or header is None:
        return False
    signatures = [part.strip() for part in header.split(",")][:MAX_SIGNATURES]
    expected = "v1=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    # Every listed v1 signature is compared (no early exit), each in constant time.
    matches = [hmac.compare_digest(expected, s) for s in signatures if PAGERDUTY_SIGNATURE.fullmatch(s)]
    return any(matches)


def webhook_id(request: Request) -> str:
    """PagerDuty's X-Webhook-Id when sent once and shaped like an id; "" otherwise."""
    value = _one_header(request, "x-webhook-id") or ""
    return value if WEBHOOK_ID.fullmatch(value) else ""
