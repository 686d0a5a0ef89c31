"""What a booting TPU VM publishes about itself, and the names both sides agree on.

The startup script (infra/templates/startup-script.sh, rendered from these constants by
infra/startup_script.py) writes guest attributes through the VM's metadata server:

    PUT http://metadata.google.internal/computeMetadata/v1/instance/guest-attributes/tpubot/<key>
    Metadata-Flavor: Google

and the bot reads them back with the TPU API's `projects.locations.nodes.getGuestAttributes`
(reference/vllm-tpu.md §5). Guest attributes are readable by anyone who can read the node, so only
these small, non-secret strings ever go there.

Keys in NAMESPACE:
- `phase`: one of PHASES, the boot step in progress (`crashed` after the vLLM container exited,
  `failed` when a step before vLLM gave up: the VM will not try again).
- `phase-since`: when that phase started, RFC 3339 UTC with a `Z` (`2026-12-02T14:03:11Z`).
- `last-error`: while a step before vLLM retries, why (its HTTP status or Docker's error line, the
  try and the wait); after `failed`, the line it gave up on; after a crash, the last error-looking
  line of the container's log (one line, cut to LAST_ERROR_MAX_CHARS); empty otherwise.
- `restarts`: how many times the vLLM container has exited since the VM booted (decimal).
- `cache`: `warm` if a compile cache was restored before vLLM started, `cold` if the bucket had none
  yet (this boot saves one), `off` if there is no bucket cache (no XLA_CACHE_BUCKET, or it cannot
  be read).
- `cache-note`: why, in one line (`restored from gs://…`, `XLA_CACHE_BUCKET is not set: …`, a
  refused read with the role to grant), and later whether the save worked.
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
CACHE_NOTE_KEY = "cache-note"

READING_SECRETS = "reading-secrets"
PULLING_IMAGE = "pulling-image"
RESTORING_CACHE = "restoring-cache"
LOADING_WEIGHTS = "loading-weights"
COMPILING = "compiling"
SERVING = "serving"
CRASHED = "crashed"
FAILED = "failed"
# In boot order; `crashed` can follow the vLLM phases (and `loading-weights` follows it on a restart);
# `failed` ends the steps before vLLM (secrets, pull) for good.
PHASES = (READING_SECRETS, PULLING_IMAGE, RESTORING_CACHE, LOADING_WEIGHTS, COMPILING, SERVING, CRASHED, FAILED)
BEFORE_VLLM = (READING_SECRETS, PULLING_IMAGE, RESTORING_CACHE)

CACHE_WARM = "warm"
CACHE_COLD = "cold"
CACHE_OFF = "off"
CACHE_STATES = (CACHE_WARM, CACHE_COLD, CACHE_OFF)

LAST_ERROR_MAX_CHARS = 400  # a guest attribute value is small; the card shows one line
SINCE_FORMAT = "%Y-%m-%dT%H:%M:%SZ"  # what `date -u +%Y-%m-%dT%H:%M:%SZ` prints on the VM


@dataclass(frozen=True)
class BootReport:
    """The VM's own account of its boot, as read back from its guest attributes."""

    phase: str | None = None  # one of PHASES; None if nothing (recognised) was published yet
    since: datetime | None = None
    last_error: str = ""
    restarts: int = 0
    cache: str | None = None  # one of CACHE_STATES, or None
    cache_note: str = ""


def read_report(values: Mapping[str, str]) -> BootReport:
    """A BootReport from NAMESPACE's key → value pairs; a malformed value reads as absent, never raises."""
    phase = values.get(PHASE_KEY)
    cache = values.get(CACHE_KEY)
    return BootReport(
        phase=phase if phase in PHASES else None,
        since=parse_since(values.get(PHASE_SINCE_KEY, "")),
        last_error=" ".join(values.get(LAST_ERROR_KEY, "").split())[:LAST_ERROR_MAX_CHARS],
        restarts=_count(values.get(RESTARTS_KEY, "")),
        cache=cache if cache in CACHE_STATES else None,
        cache_note=" ".join(values.get(CACHE_NOTE_KEY, "").split())[:LAST_ERROR_MAX_CHARS],
    )


def parse_since(text: str) -> datetime | None:
    try:
        return datetime.strptime(text.strip(), SINCE_FORMAT).replace(tzinfo=timezone.utc)
    except ValueError:
        return None


def _count(text: str) -> int:
    text = text.strip()
    return int(text) if text.isdigit() else 0
