"""Are there Google credentials to sign with? Asked once, at start, by every process with GCP_PROJECT set.

The check is google-auth's own discovery, `google.auth.default()`, which looks in order at
GOOGLE_APPLICATION_CREDENTIALS, gcloud's application-default file, the App Engine runtime and
the metadata server of the machine it runs on (GCE, GKE, Cloud Run), and raises
`DefaultCredentialsError` when none has credentials. It fetches no token: nothing is sent to
Google, so an expired or revoked credential passes here and fails at its first use, where the
caller says so on the card (infra/tpu_errors.py classifies google-auth's RefreshError). The
only request it may make is its probe of the local metadata server when no file is set, which
off Google Cloud fails within google-auth's GCE_METADATA_TIMEOUT.
"""

from __future__ import annotations

import os
import re

CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"
CREDENTIALS_VARIABLE = "GOOGLE_APPLICATION_CREDENTIALS"
ADC_FIX = ("run `gcloud auth application-default login`, or set GOOGLE_APPLICATION_CREDENTIALS to a service-account "
           "key file (on Google Cloud, the workload's service account provides them); leave GCP_PROJECT empty to use "
           "the local sandbox")


REJECTED_FIX = "refresh the credentials (`gcloud auth application-default login`) or replace the key file"


def rejected_credentials(error: BaseException) -> str | None:
    """What Google said when it refused credentials that exist (a deleted, rotated or expired key); None
    for any other error. Two shapes: google-auth's RefreshError when the token endpoint refuses, and a
    401 from the API itself when the client signed its own JWT (the REST clients do, for service-account
    keys), which never reaches the token endpoint."""
    from google.api_core import exceptions as gexc
    from google.auth import exceptions as auth_exc

    if isinstance(error, auth_exc.RefreshError) and not (
            error.retryable or isinstance(error.__cause__, (auth_exc.TransportError, ConnectionError))):
        # (A metadata server that did not answer raises RefreshError too: an outage, not a refusal.)
        # google-auth raises it with (what the token endpoint said, its raw response): the first is the words.
        return error.args[0] if error.args and isinstance(error.args[0], str) else str(error)
    if isinstance(error, gexc.Unauthorized):  # 401, and its gRPC form Unauthenticated
        return google_words(error)
    return None


REQUEST_PREFIX = re.compile(r"^(?:GET|POST|PUT|PATCH|DELETE) \S+: ")


def google_words(error: BaseException) -> str:
    """A google-api-core error's message without the "POST https://…: " a REST client puts before Google's words."""
    message = getattr(error, "message", None) or str(error)
    return REQUEST_PREFIX.sub("", str(message))


def missing_credentials(project: str) -> str | None:
    """One line saying why there are no Application Default Credentials and how to get them; None
    when google-auth finds some."""
    import google.auth
    from google.auth import exceptions as auth_exc

    try:
        google.auth.default(scopes=[CLOUD_PLATFORM_SCOPE])
    except auth_exc.DefaultCredentialsError as error:
        named = os.environ.get(CREDENTIALS_VARIABLE, "")
        if named:
            return (f"{CREDENTIALS_VARIABLE}={named} gives no credentials ({_first_sentence(error)}); point it at "
                    "a service-account key file (JSON), or unset it to use `gcloud auth application-default "
                    "login`'s")
        return f"GCP_PROJECT={project} is set, but no Google credentials were found; {ADC_FIX}"
    return None


def _first_sentence(error: Exception) -> str:
    text = str(error).strip()
    return text.split(". ", 1)[0].rstrip(".") if text else type(error).__name__
