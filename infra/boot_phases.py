"""What a booting TPU VM publishes about itself, and the names both sides agree on.

The startup script (infra/templates/startup-script.sh, rendered from these constants by
infra/startup_script.py) writes guest attributes through the VM's metadata server:

    PUT http://metadata.google.internal/computeMetadata/v1/instance/guest-attributes/tpubot/<key>
    Metadata-Flavor: Google

and the bot reads them back with the TPU API's `projects.locations.nodes.getGuestAttributes`
(reference/vllm-tpu.md §5). Guest attributes are readable by anyone who can read the node, so only
these small, non-secret strings ever go there.

Keys in NAMESPACE:
- `phase`: one of PHASES, the boot step in progress (`crashed` after the vLLM container exited).
- `phase-since`: when that phase started, RFC 3339 UTC with a `Z` (`2026-12-02T14:03:11Z`).
- `last-error`: after a crash, the last error-looking line of the container's log (one line, cut to
  LAST_ERROR_MAX_CHARS); empty otherwise.
- `restarts`: how many times the vLLM container has exited since the VM booted (decimal).
- `cache`: `warm` if a compile cache was restored before vLLM started, `cold` if not.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Mapping

NAMESPACE = "tpubot"

PHASE_KEY = "phase"
PHASE_SINCE_KEY = "phase-since"
LAST_ERROR_KEY = "last-error"
RESTARTS_KEY = "restarts"
CACHE_KEY = "cache"
KEYS = (PHASE_KEY, PHASE_SINCE_KEY, LAST_ERROR_KEY, RESTARTS_KEY, CACHE_KEY)

SECRETS_FETCHED = "secrets-fetched"
PULLING_IMAGE = "pulling-image"
LOADING_WEIGHTS = "loading-weights"
COMPILING = "compiling"
SERVING = "serving"
CRASHED = "crashed"
# In boot order; `crashed` can follow any of them (and `loading-weights` follows it on a restart).
PHASES = (SECRETS_FETCHED, PULLING_IMAGE, LOADING_WEIGHTS, COMPILING, SERVING, CRASHED)

CACHE_WARM = "warm"
CACHE_COLD = "cold"

LAST_ERROR_MAX_CHARS = 400  # a guest attribute value is small; the card shows one line
SINCE_FORMAT = "%Y-%m-%dT%H:%M:%SZ"  # what `date -u +%Y-%m-%dT%H:%M:%SZ` prints on the VM


def attribute_path(key: str) -> str:
    """The metadata-server path (after `computeMetadata/v1/`) the VM writes `key` to."""
    return f"instance/guest-attributes/{NAMESPACE}/{key}"


@dataclass(frozen=True)
class BootReport:
    """The VM's own account of its boot, as read back from its guest attributes."""

    phase: str | None = None  # one of PHASES; None if nothing (recognised) was published yet
    since: datetime | None = None
    last_error: str = ""
    restarts: int = 0
    cache: str | None = None  # CACHE_WARM, CACHE_COLD or None


def read_report(values: Mapping[str, str]) -> BootReport:
    """A BootReport from NAMESPACE's key → value pairs; a malformed value reads as absent, never raises."""
    phase = values.get(PHASE_KEY)
    cache = values.get(CACHE_KEY)
    return BootReport(
        phase=phase if phase in PHASES else None,
        since=parse_since(values.get(PHASE_SINCE_KEY, "")),
        last_error=" ".join(values.get(LAST_ERROR_KEY, "").split())[:LAST_ERROR_MAX_CHARS],
        restarts=_count(values.get(RESTARTS_KEY, "")),
        cache=cache if cache in (CACHE_WARM, CACHE_COLD) else None,
    )


def parse_since(text: str) -> datetime | None:
    try:
        return datetime.strptime(text.strip(), SINCE_FORMAT).replace(tzinfo=timezone.utc)
    except ValueError:
        return None


def _count(text: str) -> int:
    text = text.strip()
    return int(text) if text.isdigit() else 0
