"""The one place the web process goes around bolt: form bodies bolt would misread, handed to it parsed.

Written against slack_bolt 1.30.0. Every other request takes bolt's documented path (its starlette
adapter, which parses the raw body and checks the signature itself); this module exists because
that path cannot carry one kind of body.

Why: bolt parses an HTTP body in `slack_bolt/request/internals.parse_body`, which takes any form
body that merely contains the text "payload" for an interaction, finds no `payload` field and
dispatches an empty body: `/tpu up payload` would get a 404 (tests/test_slack_lifecycle.py). The
raw body cannot be rewritten without breaking its signature, so such a body is handed to bolt
already parsed, the one way bolt takes one: an `AsyncBoltRequest(body=dict, mode="socket_mode")`
(its documented constructor). bolt checks no signature on socket-mode requests, so the check
bolt would have made on the HTTP path is made here first, with the same slack_sdk verifier over
the same raw bytes; a badly signed body never reaches bolt (whose refusal would log it).

What would remove it: bolt's parse_body reading a form body as an interaction only when it has a
`payload` field. tests/test_bolt_form_adapter.py fails as soon as bolt parses such a body right
(or stops taking parsed bodies, or starts checking signatures on them); then delete this module.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from urllib.parse import parse_qsl

from slack_bolt.adapter.starlette.async_handler import to_starlette_response
from slack_bolt.async_app import AsyncApp, AsyncBoltRequest
from slack_sdk.signature import SignatureVerifier
from starlette.responses import JSONResponse, Response


def form_bolt_misreads(raw: bytes) -> dict[str, str] | None:
    """The fields of a form body (a slash command) that bolt would misread, else None: one that
    contains "payload" without being an interaction (`payload=…`) or JSON."""
    if b"payload" not in raw or raw.startswith(b"payload=") or raw.lstrip().startswith(b"{"):
        return None
    try:
        fields = dict(parse_qsl(raw.decode("utf-8"), keep_blank_values=True))
    except UnicodeDecodeError:
        return None
    return None if "payload" in fields else fields


class ParsedFormDispatch:
    """Dispatches a form bolt would misread (see form_bolt_misreads) to `bolt`, parsed."""

    def __init__(self, bolt: AsyncApp, signing_secret: str) -> None:
        self._bolt = bolt
        # slack_sdk refuses an empty secret; with none set, no signature is valid.
        self._verifier = SignatureVerifier(signing_secret or "unset")

    async def dispatch(self, raw: bytes, headers: Mapping[str, str]) -> Response:
        """`raw`, parsed here (so what bolt runs is what was signed), through bolt if `raw` is signed
        as bolt would require on its HTTP path; else the 401 bolt gives."""
        plain = dict(headers)
        if not self._verifier.is_valid_request(raw, plain):
            return JSONResponse({"error": "invalid request"}, status_code=401)
        form = form_bolt_misreads(raw)
        if form is None:
            return JSONResponse({"error": "not a form body bolt misreads; send it on bolt's own path"}, status_code=400)
        bolt_headers: dict[str, str | Sequence[str]] = dict(plain)
        request = AsyncBoltRequest(body=form, headers=bolt_headers, mode="socket_mode")
        return to_starlette_response(await self._bolt.async_dispatch(request))
