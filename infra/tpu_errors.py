"""Classification of every error the TPU API can return, in one place.

Whatever fails — a synchronous HTTP error from the typed client or the raw v2alpha1 session, an
LRO error, the `failedData.error` of a FAILED queued resource, a dropped connection — ends up
here and becomes one `TpuError` whose `kind` tells the caller what to do next:

- zone-scoped (FLEX_START_UNSUPPORTED, NO_CAPACITY): try another zone, skip this one for a while;
- region-scoped (QUOTA_EXCEEDED): skip every zone of the region;
- configuration (NETWORK_NOT_FOUND, PERMISSION_DENIED, INVALID_ACCELERATOR, INVALID_RUNTIME,
  ZONE_NOT_SUPPORTED): stop searching, `setting` names the variable to fix;
- transient (RATE_LIMITED, UNAVAILABLE): retry the same call (`retryable=True`).

Messages are matched first (the TPU API reports very different problems with the same status
code: a FLEX_START rejection and a bad accelerator are both INVALID_ARGUMENT), the status code is
the fallback. The texts matched are the ones seen in the wild (reference/gcp-apis.md §4.3).
"""

from __future__ import annotations

import enum
import re
from datetime import timedelta
from typing import Protocol

import requests
from google.api_core import exceptions as gexc
from google.auth import exceptions as auth_exc

from infra.gcp_credentials import CREDENTIALS_VARIABLE, REJECTED_FIX, google_words, rejected_credentials

# google.rpc.Code numbers used by LRO errors and failedData.error.
GRPC_INVALID_ARGUMENT = 3
GRPC_DEADLINE_EXCEEDED = 4
GRPC_NOT_FOUND = 5
GRPC_ALREADY_EXISTS = 6
GRPC_PERMISSION_DENIED = 7
GRPC_RESOURCE_EXHAUSTED = 8
GRPC_ABORTED = 10
GRPC_INTERNAL = 13
GRPC_UNAVAILABLE = 14
GRPC_UNAUTHENTICATED = 16

# HTTP status -> google.rpc.Code, so HTTP errors and LRO/failedData errors share one rule table.
_HTTP_TO_GRPC = {
    400: GRPC_INVALID_ARGUMENT,
    401: GRPC_UNAUTHENTICATED,
    403: GRPC_PERMISSION_DENIED,
    404: GRPC_NOT_FOUND,
    409: GRPC_ALREADY_EXISTS,
    429: GRPC_RESOURCE_EXHAUSTED,
    500: GRPC_INTERNAL,
    502: GRPC_UNAVAILABLE,
    503: GRPC_UNAVAILABLE,
    504: GRPC_DEADLINE_EXCEEDED,
}


class ErrorScope(str, enum.Enum):
    """How far the problem reaches — what a zone search should skip."""

    ZONE = "zone"
    REGION = "region"
    CONFIGURATION = "configuration"
    TRANSIENT = "transient"
    RESOURCE = "resource"  # about one resource (not found, already exists), not about where to run
    UNKNOWN = "unknown"


class TpuErrorKind(str, enum.Enum):
    FLEX_START_UNSUPPORTED = "flex_start_unsupported"
    NO_CAPACITY = "no_capacity"
    QUOTA_EXCEEDED = "quota_exceeded"
    NETWORK_NOT_FOUND = "network_not_found"
    PERMISSION_DENIED = "permission_denied"
    INVALID_ACCELERATOR = "invalid_accelerator"
    INVALID_RUNTIME = "invalid_runtime"
    ZONE_NOT_SUPPORTED = "zone_not_supported"
    RATE_LIMITED = "rate_limited"
    UNAVAILABLE = "unavailable"
    NOT_FOUND = "not_found"
    ALREADY_EXISTS = "already_exists"
    UNKNOWN = "unknown"

    @property
    def scope(self) -> ErrorScope:
        return _SCOPES[self]

    @property
    def stops_search(self) -> bool:
        """A configuration error fails the same way in every zone: searching on wastes time."""
        return self.scope is ErrorScope.CONFIGURATION

    @property
    def suggested_skip(self) -> timedelta | None:
        """How long a zone (or region) with this error is not worth retrying; None = not a zone matter."""
        return _SKIPS.get(self)


_SCOPES = {
    **dict.fromkeys((TpuErrorKind.FLEX_START_UNSUPPORTED, TpuErrorKind.NO_CAPACITY), ErrorScope.ZONE),
    TpuErrorKind.QUOTA_EXCEEDED: ErrorScope.REGION,
    **dict.fromkeys((TpuErrorKind.NETWORK_NOT_FOUND, TpuErrorKind.PERMISSION_DENIED, TpuErrorKind.INVALID_ACCELERATOR,
                     TpuErrorKind.INVALID_RUNTIME, TpuErrorKind.ZONE_NOT_SUPPORTED), ErrorScope.CONFIGURATION),
    **dict.fromkeys((TpuErrorKind.RATE_LIMITED, TpuErrorKind.UNAVAILABLE), ErrorScope.TRANSIENT),
    **dict.fromkeys((TpuErrorKind.NOT_FOUND, TpuErrorKind.ALREADY_EXISTS), ErrorScope.RESOURCE),
    TpuErrorKind.UNKNOWN: ErrorScope.UNKNOWN,
}

_SKIPS = {
    # Support for FLEX_START per (accelerator, zone) changes on the scale of product launches.
    TpuErrorKind.FLEX_START_UNSUPPORTED: timedelta(days=3),
    # Capacity comes and goes within minutes.
    TpuErrorKind.NO_CAPACITY: timedelta(minutes=10),
    # Quota changes need a human (a quota request), but one may be granted within the hour.
    TpuErrorKind.QUOTA_EXCEEDED: timedelta(hours=1),
}


class TpuError(Exception):
    """The only exception type that leaves `infra.tpu.TpuService`."""

    def __init__(
        self,
        kind: TpuErrorKind,
        message: str,
        *,
        zone: str | None = None,
        region: str | None = None,
        setting: str | None = None,
        fix: str | None = None,
        retryable: bool = False,
        code: int | None = None,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.zone = zone
        self.region = region or (region_of(zone) if zone else None)
        self.setting = setting
        self.fix = fix
        self.retryable = retryable
        self.code = code  # google.rpc.Code number, when known

    def __str__(self) -> str:
        where = f" in {self.zone}" if self.zone else (f" in {self.region}" if self.region else "")
        text = f"{self.kind.value}{where}: {self.message}"
        if self.fix:
            text += f" — {self.fix}"
        return text

    def __repr__(self) -> str:
        return (
            f"TpuError(kind={self.kind.name}, zone={self.zone!r}, setting={self.setting!r}, "
            f"retryable={self.retryable}, message={self.message!r})"
        )


def region_of(zone: str) -> str:
    """`us-west4-a` -> `us-west4`."""
    return zone.rsplit("-", 1)[0]


# --- the rule table --------------------------------------------------------------------------

_FLEX_START = re.compile(
    r'FLEX_START provisioning model is not supported for accelerator type "(?P<accel>[^"]+)" '
    r'in location "(?P<zone>[^"]+)"'
)
_NO_CAPACITY = re.compile(
    r'no more capacity in the zone "(?P<zone>[^"]+)"|Insufficient reserved capacity|'
    r"\bstockout\b|ZONE_RESOURCE_POOL_EXHAUSTED",
    re.IGNORECASE,
)
_QUOTA = re.compile(
    r"Quota (?:limit )?'(?P<quota>[^']+)' (?:exhausted|has been exceeded)[.;]?"
    r"(?:.*?in region (?P<region>[a-z0-9-]+))?",
    re.IGNORECASE,
)
_RATE = re.compile(r"per minute|RATE_LIMIT_EXCEEDED|rate limit", re.IGNORECASE)
_NETWORK = re.compile(
    r'has no network named "(?P<net>[^"]+)"|/networks/(?P<net2>[^\'"/\s]+)\' was not found', re.IGNORECASE
)
_SUBNETWORK = re.compile(r"/subnetworks/(?P<sub>[^'\"/\s]+)' was not found|subnetwork", re.IGNORECASE)
_ZONE = re.compile(r'The requested zone "(?P<zone>[^"]+)" is not supported', re.IGNORECASE)
_ACCELERATOR = re.compile(
    r'accelerator configuration for accelerator type, "(?P<accel>[^"]+)"|'
    r"the accelerator (?P<accel2>\S+) was not found in zone|"
    r"(?:invalid|unknown|unsupported) accelerator type",
    re.IGNORECASE,
)
_RUNTIME = re.compile(r"runtime version|runtimeVersion|runtime_version", re.IGNORECASE)
# Creating a TPU that runs as an account takes acting as it; IAM's words name the account.
_ACT_AS = re.compile(r"iam\.serviceAccounts\.actAs'? denied on service account (?P<email>[^\s'\"]+@[^\s'\"]+)",
                     re.IGNORECASE)
_PERMISSION = re.compile(
    r"Permission '[^']+' denied|PERMISSION_DENIED|has not been used in project|is disabled|"
    r"SERVICE_DISABLED|does not have permission|billing",
    re.IGNORECASE,
)
# api_core prefixes HTTP error messages with "POST https://...: "; users need the API's words only.
_LOCATION_IN_TEXT = re.compile(r'(?:zone|location)[ "]+(?P<zone>[a-z]+-[a-z]+\d+-[a-z])\b')


def act_as_fix(email: str, bot_account: str = "$BOT_SA") -> str:
    """The README's last grant of "A dedicated account instead": the bot's account may act as `email`."""
    project = email.partition("@")[2].removesuffix(".iam.gserviceaccount.com")
    where = f" --project {project}" if "." not in project else ""
    return (f"let the account the bot runs as ({bot_account}) act as {email}: `gcloud iam service-accounts "
            f"add-iam-policy-binding {email}{where} --member serviceAccount:{bot_account} --role "
            "roles/iam.serviceAccountUser` (README, \"A dedicated account instead\"), or leave "
            "TPU_SERVICE_ACCOUNT empty to run as the default Compute Engine account")


def classify_status(code: int | None, message: str, *, zone: str | None = None, reason: str | None = None) -> TpuError:
    """Classify a `google.rpc.Status`-like error (LRO error, failedData.error): `code` is a gRPC code."""
    return _classify(code, message or "", zone=zone, reason=reason or "")


def classify_http(status: int, message: str, *, zone: str | None = None, reason: str | None = None) -> TpuError:
    """Classify an HTTP error response by its status and message."""
    return _classify(_HTTP_TO_GRPC.get(status, GRPC_INTERNAL if status >= 500 else None), message or "",
                     zone=zone, reason=reason or "")


class FailedQueuedResource(Protocol):
    """What `classify_failed_qr` reads; `infra.tpu.QueuedResourceView` (frozen) has it."""

    @property
    def qr_id(self) -> str: ...
    @property
    def zone(self) -> str: ...
    @property
    def state(self) -> str: ...
    @property
    def failure_code(self) -> int | None: ...
    @property
    def failure_message(self) -> str | None: ...


def classify_failed_qr(qr: FailedQueuedResource) -> TpuError | None:
    """The classified `failedData.error` of a FAILED queued resource; None for any other state.

    A QR that ran out of valid-until time while waiting reports RESOURCE_EXHAUSTED with the
    capacity text, which becomes NO_CAPACITY for its zone.
    """
    if qr.state != "FAILED":  # QrState.FAILED (a StrEnum; infra.tpu imports this module)
        return None
    if qr.failure_code is None and not qr.failure_message:
        return TpuError(TpuErrorKind.UNKNOWN, f"queued resource {qr.qr_id} FAILED without a reason", zone=qr.zone)
    return classify_status(qr.failure_code, qr.failure_message or "", zone=qr.zone)


def classify_exception(exc: BaseException, *, zone: str | None = None) -> TpuError:
    """Turn anything a Google client, google-auth or requests raised into a `TpuError`."""
    if isinstance(exc, TpuError):
        return exc
    if isinstance(exc, gexc.GoogleAPICallError):
        grpc_code = _grpc_code_of(exc)
        message = google_words(exc)
        error = _classify(grpc_code, message, zone=zone, reason=exc.reason or "")
        error.__cause__ = exc
        return error
    if isinstance(exc, gexc.RetryError):  # an LRO wait that ran out of time
        return TpuError(TpuErrorKind.UNAVAILABLE, f"timed out waiting for the TPU API: {exc}", zone=zone,
                        retryable=True, code=GRPC_DEADLINE_EXCEEDED)
    if isinstance(exc, (requests.ConnectionError, requests.Timeout, auth_exc.TransportError, TimeoutError,
                        ConnectionError)):
        return TpuError(TpuErrorKind.UNAVAILABLE, f"cannot reach the TPU API: {exc}", zone=zone, retryable=True,
                        code=GRPC_UNAVAILABLE)
    if isinstance(exc, auth_exc.GoogleAuthError) and (
            exc.retryable or isinstance(exc.__cause__, (auth_exc.TransportError, requests.ConnectionError))):
        # A token fetch that did not get an answer: on GKE or a VM, compute_engine.Credentials.refresh
        # raises RefreshError from the metadata server's TransportError (retryable=False), and that
        # is an outage of the metadata server, not credentials refused.
        return TpuError(TpuErrorKind.UNAVAILABLE, f"cannot get a Google access token now: {exc}", zone=zone,
                        retryable=True, code=GRPC_UNAVAILABLE)
    if isinstance(exc, auth_exc.DefaultCredentialsError):
        return TpuError(
            TpuErrorKind.PERMISSION_DENIED, f"no Google credentials: {exc}", zone=zone,
            setting="GOOGLE_APPLICATION_CREDENTIALS",
            fix="run `gcloud auth application-default login` or set GOOGLE_APPLICATION_CREDENTIALS "
                "to a service-account key; leave GCP_PROJECT empty to use the local sandbox",
            code=GRPC_UNAUTHENTICATED,
        )
    if (said := rejected_credentials(exc)) is not None:
        return TpuError(TpuErrorKind.PERMISSION_DENIED, f"Google credentials were rejected: {said}", zone=zone,
                        setting=CREDENTIALS_VARIABLE, fix=REJECTED_FIX, code=GRPC_UNAUTHENTICATED)
    return TpuError(TpuErrorKind.UNKNOWN, f"{type(exc).__name__}: {exc}", zone=zone)


def _grpc_code_of(exc: gexc.GoogleAPICallError) -> int | None:
    grpc_status = getattr(exc, "grpc_status_code", None)
    if grpc_status is not None:
        value = grpc_status.value
        return value[0] if isinstance(value, tuple) else int(value)
    if exc.code is not None:
        return _HTTP_TO_GRPC.get(int(exc.code), GRPC_INTERNAL if int(exc.code) >= 500 else None)
    return None


def _classify(code: int | None, message: str, *, zone: str | None, reason: str) -> TpuError:
    # Order matters: the FLEX_START text also names an accelerator type, quota texts mention regions.
    if match := _FLEX_START.search(message):
        where = match.group("zone")
        return TpuError(
            TpuErrorKind.FLEX_START_UNSUPPORTED, message, zone=where, code=code,
            fix=f"{where} does not offer flex-start {match.group('accel')}; try another zone (us-west4-a accepts it)",
        )
    if match := _QUOTA.search(message):
        if _RATE.search(message) or reason == "RATE_LIMIT_EXCEEDED":
            return _rate_limited(message, zone, code)
        region = match.group("region") or (region_of(zone) if zone else None)
        return TpuError(
            TpuErrorKind.QUOTA_EXCEEDED, message, zone=zone, region=region, code=code,
            fix=f"request more of quota {match.group('quota')}"
                + (f" in region {region}" if region else "")
                + " (flex-start draws on the preemptible quota), delete leftover SUSPENDED/FAILED queued "
                  "resources, or try another region",
        )
    if match := _NO_CAPACITY.search(message):
        where = match.groupdict().get("zone") or zone
        return TpuError(TpuErrorKind.NO_CAPACITY, message, zone=where, retryable=False, code=code,
                        fix="wait and retry later, or try another zone")
    if match := _ZONE.search(message):
        where = match.group("zone")
        return TpuError(TpuErrorKind.ZONE_NOT_SUPPORTED, message, zone=where, setting="TPU_ZONES", code=code,
                        fix=f"remove {where} from TPU_ZONES (and TPU_ZONE); see cloud.google.com/tpu/docs/regions-zones")
    if match := _NETWORK.search(message):
        network = match.group("net") or match.group("net2")
        return TpuError(TpuErrorKind.NETWORK_NOT_FOUND, message, zone=zone, setting="NETWORK", code=code,
                        fix=f"network {network!r} does not exist in this project: set NETWORK to an existing VPC "
                            "network (`gcloud compute networks list`)")
    if code == GRPC_INVALID_ARGUMENT or code == GRPC_NOT_FOUND:
        if match := _SUBNETWORK.search(message):
            return TpuError(TpuErrorKind.NETWORK_NOT_FOUND, message, zone=zone, setting="SUBNETWORK", code=code,
                            fix="set SUBNETWORK to a subnetwork of NETWORK in this region, or leave it empty")
    if match := _ACCELERATOR.search(message):
        accel = match.group("accel") or match.group("accel2") or "the accelerator type"
        return TpuError(TpuErrorKind.INVALID_ACCELERATOR, message, zone=zone or _zone_in(message),
                        setting="TPU_ACCELERATOR_TYPE", code=code,
                        fix=f"{accel} is not offered here: use TPU_ACCELERATOR_TYPE=v5litepod-1 "
                            "(never v5e-1) and zones that offer v5e")
    if code == GRPC_INVALID_ARGUMENT and _RUNTIME.search(message):
        return TpuError(TpuErrorKind.INVALID_RUNTIME, message, zone=zone, setting="TPU_RUNTIME_VERSION", code=code,
                        fix="use TPU_RUNTIME_VERSION=v2-alpha-tpuv5-lite for v5litepod accelerators")
    if match := _ACT_AS.search(message):
        return TpuError(TpuErrorKind.PERMISSION_DENIED, message, zone=zone, setting="TPU_SERVICE_ACCOUNT", code=code,
                        fix=act_as_fix(match.group("email").rstrip(".")))
    if code in (GRPC_PERMISSION_DENIED, GRPC_UNAUTHENTICATED) or _PERMISSION.search(message):
        if code == GRPC_UNAUTHENTICATED:
            return TpuError(TpuErrorKind.PERMISSION_DENIED, message, zone=zone,
                            setting="GOOGLE_APPLICATION_CREDENTIALS", code=code,
                            fix="the credentials are missing or expired: `gcloud auth application-default login`")
        return TpuError(TpuErrorKind.PERMISSION_DENIED, message, zone=zone, setting="GCP_PROJECT", code=code,
                        fix="check GCP_PROJECT, that the TPU API is enabled there, and that the bot's account "
                            "has roles/tpu.admin (and roles/iam.serviceAccountUser)")
    if code == GRPC_RESOURCE_EXHAUSTED:
        # Without a quota text, RESOURCE_EXHAUSTED from an HTTP call is the API's rate limit; inside an
        # LRO or failedData it is the zone running out of TPUs.
        if reason == "RATE_LIMIT_EXCEEDED" or _RATE.search(message):
            return _rate_limited(message, zone, code)
        return TpuError(TpuErrorKind.NO_CAPACITY, message, zone=zone or _zone_in(message), code=code,
                        fix="wait and retry later, or try another zone")
    if code in (GRPC_UNAVAILABLE, GRPC_DEADLINE_EXCEEDED, GRPC_INTERNAL, GRPC_ABORTED):
        return TpuError(TpuErrorKind.UNAVAILABLE, message, zone=zone, retryable=True, code=code)
    if code == GRPC_NOT_FOUND:
        return TpuError(TpuErrorKind.NOT_FOUND, message, zone=zone, code=code)
    if code == GRPC_ALREADY_EXISTS:
        return TpuError(TpuErrorKind.ALREADY_EXISTS, message, zone=zone, code=code)
    return TpuError(TpuErrorKind.UNKNOWN, message, zone=zone, code=code)


def _rate_limited(message: str, zone: str | None, code: int | None) -> TpuError:
    return TpuError(TpuErrorKind.RATE_LIMITED, message, zone=zone, retryable=True, code=code,
                    fix="too many TPU API requests per minute; retry with backoff")


def _zone_in(message: str) -> str | None:
    match = _LOCATION_IN_TEXT.search(message)
    return match.group("zone") if match else None
