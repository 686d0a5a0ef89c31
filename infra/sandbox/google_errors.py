"""Google's JSON error body, as every emulated Google API sends it (google.rpc.Status over HTTP):
`{"error": {"code", "message", "status", "details"}}`; Compute Engine and Cloud Storage send their
older shape instead, no status and an `errors[]` list with a reason."""

from __future__ import annotations

from typing import Any

# The canonical status of each HTTP code the emulators answer with (google.rpc.Code's mapping).
STATUS = {400: "INVALID_ARGUMENT", 403: "PERMISSION_DENIED", 404: "NOT_FOUND", 405: "UNIMPLEMENTED",
          409: "ALREADY_EXISTS", 429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE",
          504: "DEADLINE_EXCEEDED"}


def error_body(code: int, message: str, status: str = "", details: list[dict] | None = None) -> dict:
    """`status` where one HTTP code has several (409: ALREADY_EXISTS or ABORTED); `details` when sent."""
    error: dict[str, Any] = {"code": code, "message": message, "status": status or STATUS.get(code, "UNKNOWN")}
    if details is not None:
        error["details"] = details
    return {"error": error}


def error_info(reason: str, domain: str, **metadata: str) -> dict:
    return {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": reason, "domain": domain,
            "metadata": metadata}


def resource_info(name: str, **fields: str) -> dict:
    return {"@type": "type.googleapis.com/google.rpc.ResourceInfo", **fields, "resourceName": name}


def legacy_error(code: int, message: str, reason: str) -> dict:
    return {"error": {"code": code, "message": message,
                      "errors": [{"message": message, "domain": "global", "reason": reason}]}}
