"""Credentials that exist but that Google refuses (a deleted or rotated service-account key) pass the
start-up check, which fetches no token, and fail at their first use: that is one line on the
lease's card, never a traceback on a terminal and never a channel stuck in CREATING (issue 44).

Real parts: google-auth's own service-account credentials from a key file, signing a real JWT
with a key made for the test and posting it to a token endpoint; the TPU client behind them,
pointed at the sandbox TPU API. The token endpoint is a stand-in for Google's
(oauth2.googleapis.com/token) answering as Google answers a JWT signed by a key it no longer
knows: HTTP 400 with the body quoted in googleapis/google-cloud-python#10004.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from infra.gcp_credentials import missing_credentials
from infra.sandbox.world import CloudSandbox, SandboxWorld

PROJECT = "my-project"
CHANNEL = "C0CREDS"
INVALID_GRANT = b'{\n "error": "invalid_grant",\n "error_description": "Invalid JWT Signature."\n}'


class _TokenEndpoint(BaseHTTPRequestHandler):
    posts: list[str] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        length = int(self.headers.get("content-length", 0))
        _TokenEndpoint.posts.append(self.rfile.read(length).decode())
        self.send_response(400)
        self.send_header("content-type", "application/json; charset=utf-8")
        self.send_header("content-length", str(len(INVALID_GRANT)))
        self.end_headers()
        self.wfile.write(INVALID_GRANT)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def refused_key(tmp_path, monkeypatch):
    """GOOGLE_APPLICATION_CREDENTIALS naming a well-formed key file whose token endpoint refuses it."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _TokenEndpoint)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    # The fields of a key file as `gcloud iam service-accounts keys create` writes it.
    path = tmp_path / "key.json"
    path.write_text(json.dumps({
        "type": "service_account", "project_id": PROJECT, "private_key_id": "0" * 40, "private_key": pem,
        "client_email": f"tpubot@{PROJECT}.iam.gserviceaccount.com", "client_id": "1" * 21,
        "token_uri": f"http://127.0.0.1:{server.server_address[1]}/token",
    }))
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(path))
    _TokenEndpoint.posts.clear()
    yield path
    server.shutdown()
    server.server_close()


def test_the_start_up_check_finds_the_key_without_asking_google(refused_key):
    assert missing_credentials(PROJECT) is None
    assert _TokenEndpoint.posts == []  # no token was fetched: the refusal can only show at first use


def test_a_refused_key_fails_the_lease_with_one_line_and_the_fix(refused_key, make_bot):
    with CloudSandbox(SandboxWorld(), project=PROJECT) as cloud:
        bot = make_bot(gcp_project=PROJECT, poll_interval="0.2s", **cloud.endpoint_overrides())
        requests = bot.signed_requests()
        try:
            assert "Requested" in requests.slash("up", user="UALICE", channel=CHANNEL).text
            failed = bot.until(lambda: [c.body for c in bot.slack.calls
                                        if c.method == "chat.update" and "FAILED" in c.body.get("text", "")],
                               timeout=60, what="the card FAILED")
            reason = next(b["text"]["text"] for b in failed[-1]["blocks"]
                          if b["type"] == "section" and "Reason" in b.get("text", {}).get("text", ""))
            # The lease's first call to Google is Secret Manager's (its key exists before the VM boots).
            assert reason.startswith(":red_circle: *Reason:* Google credentials were rejected: Request had invalid "
                                     "authentication credentials."), reason  # Google's words, not the URL asked
            assert "*Fix:* GOOGLE_APPLICATION_CREDENTIALS: refresh the credentials" in reason
            assert "Traceback" not in reason and "{" not in reason  # not the token endpoint's raw answer
            assert reason.count("\n") == 1  # the reason on one line, the fix on the next
            # Secret Manager's REST client signs its own JWT with the key (no token request), and the API
            # refuses it with a 401; a client that asks the token endpoint gets invalid_grant (the next test).
            assert cloud.tpu is not None and cloud.tpu.queued_resources() == []
        finally:
            requests.close()


def test_a_token_endpoint_refusal_is_the_same_one_line(refused_key):
    """The other shape of a refused key: a client that asks the token endpoint gets google-auth's
    RefreshError carrying Google's invalid_grant, which every caller names the same way."""
    import google.auth
    import google.auth.transport.requests
    from google.auth import exceptions as auth_exc

    from infra.gcp_credentials import rejected_credentials
    from infra.tpu_errors import classify_exception

    credentials, _ = google.auth.default(scopes=["https://www.googleapis.com/auth/cloud-platform"])
    with pytest.raises(auth_exc.RefreshError) as refused:
        credentials.refresh(google.auth.transport.requests.Request())
    assert "grant_type=urn" in _TokenEndpoint.posts[0]  # google-auth really asked for a token
    assert rejected_credentials(refused.value) == "invalid_grant: Invalid JWT Signature."
    error = classify_exception(refused.value, zone="us-west4-a")
    assert error.message == "Google credentials were rejected: invalid_grant: Invalid JWT Signature."
    assert error.setting == "GOOGLE_APPLICATION_CREDENTIALS" and "replace the key file" in error.fix


def test_a_metadata_server_that_does_not_answer_is_retryable_not_refused():
    """On GKE or a VM a token comes from the metadata server; google-auth's compute_engine
    Credentials.refresh raises RefreshError *from* the server's TransportError, with retryable=False
    (google/auth/compute_engine/credentials.py). A server that did not answer is an outage to retry:
    the lease's job is run again, not failed as if the credentials were refused."""
    from google.auth import exceptions as auth_exc

    from infra.tpu_errors import TpuErrorKind, classify_exception
    from infra.transient import is_transient

    try:
        try:
            raise auth_exc.TransportError("Failed to retrieve http://metadata.google.internal/computeMetadata/v1/"
                                          "instance/service-accounts/default/?recursive=true from the Google Compute "
                                          "Engine metadata service. Compute Engine Metadata server unavailable.")
        except auth_exc.TransportError as caught:
            raise auth_exc.RefreshError(caught) from caught
    except auth_exc.RefreshError as raised:
        error = classify_exception(raised, zone="us-west4-a")
    assert error.kind is TpuErrorKind.UNAVAILABLE and error.retryable and is_transient(error)
    # A token endpoint that answered and refused is not retried (test_a_token_endpoint_refusal_is_the_same_one_line).
    refused = classify_exception(auth_exc.RefreshError("invalid_grant: Invalid JWT Signature.",
                                                       {"error": "invalid_grant"}, retryable=False))
    assert not refused.retryable
