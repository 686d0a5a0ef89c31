"""Where to create the TPU: zones tried best-known-first, configuration errors stop the search.

`/tpu up` without a zone runs a `ZoneSearch`: the configured zones that offer the accelerator
(the TPU API's acceleratorTypes list, cached on the scoreboard), minus the zones and regions the
scoreboard says to skip, in scoreboard order. Each attempt is recorded. The search stops:

- at the first zone that takes the request (the QR exists: queued or provisioning);
- at once on a configuration error (`TpuErrorKind.stops_search`: network, permission, accelerator,
  runtime…) — it would fail the same way everywhere, so the user is told which setting to fix;
- when the same unclassified error has come from `same_error_limit` zones — an error that follows
  the request from zone to zone is a configuration problem, not capacity;
- when the time budget of this run is spent (the caller continues in a new job).

`ZoneOutcomeHook` records what happens after acceptance (time to ACTIVE; FAILED while still waiting
at valid-until) through the lease hooks, so the watcher needs no knowledge of the scoreboard.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

from agent.context import ZoneDeps
from infra.plurals import counted
from infra.scoreboard import Skip, ZoneOrder, ZoneScoreboard
from infra.state.leases import Lease, LeaseState
from infra.tpu_errors import ErrorScope, TpuError, TpuErrorKind, classify_status, region_of

if TYPE_CHECKING:
    from infra.tpu import QueuedResourceView, TpuService

log = logging.getLogger(__name__)

SAME_ERROR_LIMIT = 3
LIST_CONCURRENCY = 8  # acceleratorTypes look-ups in flight at once (44 zones: 6 rounds, not 44 calls in a row)
CONFIG_SETTINGS_HINT = "GCP_PROJECT, NETWORK/SUBNETWORK, TPU_ACCELERATOR_TYPE and TPU_RUNTIME_VERSION"


class SearchStatus(StrEnum):
    CREATED = "created"  # a zone took the request
    CONFIGURATION = "configuration"  # an error every zone would give: a setting to fix
    EXHAUSTED = "exhausted"  # every zone was tried (or none could be)
    UNAVAILABLE = "unavailable"  # the TPU API itself failed past the client's retries
    TIME_BUDGET = "budget"  # this run's time is spent: the search continues in a new job
    CANCELLED = "cancelled"  # the lease stopped wanting a TPU during the search


@dataclass
class SearchOutcome:
    status: SearchStatus
    zone: str = ""
    qr: QueuedResourceView | None = None  # set when created
    attempts: list[tuple[str, str]] = field(default_factory=list)  # (zone, outcome class)
    message: str = ""  # for people: what happened and what to fix
    setting: str | None = None  # the setting to fix, for configuration outcomes
    last_error: TpuError | None = None

    @property
    def created(self) -> bool:
        return self.status is SearchStatus.CREATED


class ZoneSearch:
    def __init__(self, tpu: TpuService, scoreboard: ZoneScoreboard, *, zones: tuple[str, ...] | list[str],
                 default_zone: str, same_error_limit: int = SAME_ERROR_LIMIT) -> None:
        self._tpu = tpu
        self._board = scoreboard
        self.zones = list(dict.fromkeys(zones))
        self.default_zone = default_zone
        self._same_error_limit = same_error_limit

    @property
    def accelerator(self) -> str:
        return self._board.accelerator

    async def refresh_offers(self) -> None:
        """Look up (once a day per zone) which configured zones offer the accelerator type at all."""
        known = await self._board.offers(self.zones)
        limit = asyncio.Semaphore(LIST_CONCURRENCY)

        async def look_up(zone: str) -> None:
            async with limit:
                try:
                    types = await self._tpu.aio.list_accelerator_types(zone)
                except TpuError as error:
                    # Unknown stays unknown: the zone is still tried, and its create error classified.
                    log.info("accelerator types of %s unavailable: %s", zone, error)
                    return
            await self._board.set_offers(zone, self.accelerator in types)

        await asyncio.gather(*(look_up(z) for z, offered in known.items() if offered is None))

    async def plan(self) -> ZoneOrder:
        await self.refresh_offers()
        return await self._board.order(self.zones, self.default_zone)

    async def run(
        self,
        order: list[str],
        create: Callable[[str, int, int], Awaitable[QueuedResourceView]],
        *,
        lease_id: str = "",
        deadline: float | None = None,
        still_wanted: Callable[[], Awaitable[bool]] | None = None,
    ) -> SearchOutcome:
        """Try `order` in turn with `create(zone, n, total)`; classify, record and decide after each."""
        outcome = SearchOutcome(status=SearchStatus.EXHAUSTED)
        skipped_regions: set[str] = set()
        failures: list[tuple[str, TpuError]] = []
        for n, zone in enumerate(order, start=1):
            if region_of(zone) in skipped_regions:
                continue
            if deadline is not None and outcome.attempts and time.monotonic() >= deadline:
                outcome.status = SearchStatus.TIME_BUDGET
                return outcome
            if still_wanted is not None and not await still_wanted():
                outcome.status = SearchStatus.CANCELLED
                return outcome
            try:
                qr = await create(zone, n, len(order))
            except TpuError as error:
                if error.retryable:
                    # The API itself failed past the client's retries: nothing to learn about the zone.
                    outcome.status, outcome.last_error = SearchStatus.UNAVAILABLE, error
                    outcome.message = unavailable_message(error)
                    return outcome
                zone_of_error = error.zone if error.zone in self.zones else zone
                await self._board.record_error(zone_of_error, error, lease_id)
                outcome.attempts.append((zone, error.kind.value))
                outcome.last_error = error
                if error.kind is TpuErrorKind.INVALID_ACCELERATOR and await self._offered_elsewhere(zone):
                    # Other zones list the type, so the accelerator setting is fine: this zone lacks it.
                    await self._board.set_offers(zone, False)
                    failures.append((zone, error))
                    continue
                if error.kind.stops_search:
                    return self._configuration(outcome, zone, error)
                if error.kind.scope is ErrorScope.REGION:
                    skipped_regions.add(error.region or region_of(zone))
                if error.kind.scope in (ErrorScope.UNKNOWN, ErrorScope.RESOURCE):
                    same = await self._board.same_error_zones(zone, error.message)
                    if len(same) >= self._same_error_limit:
                        return self._repeated(outcome, same, error)
                failures.append((zone, error))
                continue
            await self._board.record_accepted(zone, lease_id)
            outcome.attempts.append((zone, "accepted"))
            outcome.status, outcome.zone, outcome.qr = SearchStatus.CREATED, zone, qr
            return outcome
        outcome.message = self._exhausted_message(failures)
        return outcome

    async def _offered_elsewhere(self, zone: str) -> bool:
        offers = await self._board.offers(self.zones)
        return any(offered for other, offered in offers.items() if other != zone)

    # --- messages -------------------------------------------------------------------------
    def _configuration(self, outcome: SearchOutcome, zone: str, error: TpuError) -> SearchOutcome:
        outcome.status, outcome.zone, outcome.setting = SearchStatus.CONFIGURATION, zone, error.setting
        setting = error.setting or f"the settings ({CONFIG_SETTINGS_HINT})"
        outcome.message = (
            f"{error.message.rstrip()} This is a configuration problem: it would fail the same way in every zone, so "
            f"the search stopped after {counted(len(outcome.attempts), 'attempt')}. Fix: {setting}"
            + (f": {error.fix.rstrip('.')}" if error.fix else "") + "; then run `tpubot doctor` and `/tpu up` again."
        )
        return outcome

    def _repeated(self, outcome: SearchOutcome, zones: list[str], error: TpuError) -> SearchOutcome:
        outcome.status, outcome.setting = SearchStatus.CONFIGURATION, None
        outcome.message = (
            f"The same error came back from {len(zones)} zones ({', '.join(zones)}): {error.message} "
            "An error that follows the request from zone to zone is a configuration problem that no other zone "
            f"would fix, so the search stopped. Fix: check {CONFIG_SETTINGS_HINT}, then run `tpubot doctor`."
        )
        return outcome

    def _exhausted_message(self, failures: list[tuple[str, TpuError]]) -> str:
        if not failures:
            return ""
        parts = [f"{zone}: {_short(error)}" for zone, error in failures[:8]]
        more = f" (and {len(failures) - 8} more)" if len(failures) > 8 else ""
        return (f"No configured zone took the {self.accelerator} flex-start request — {'; '.join(parts)}{more}. "
                "Fix: wait and retry (capacity comes back within minutes), or add zones that offer flex-start "
                f"{self.accelerator} to TPU_ZONES; `/tpu zones` shows what each zone did.")


def unavailable_message(error: TpuError) -> str:
    return (f"{error.message} The TPU API kept failing after retries, so nothing was created and the channel is "
            "free again. Fix: run `/tpu up` again in a few minutes (a Google Cloud outage shows on "
            "status.cloud.google.com).")


def nothing_to_try_message(plan: ZoneOrder, accelerator: str, clock: Callable[[], float] = time.time) -> str:
    """Why a search has no candidate at all: every zone skipped or not offering the type."""
    parts = [f"{zone} skipped for {_until(skip, clock())} ({skip.outcome.replace('_', ' ')})"
             for zone, skip in plan.skipped[:8]]
    if plan.not_offered:
        parts.append(f"{', '.join(plan.not_offered[:8])} do not offer {accelerator}")
    return ("No configured zone is worth trying right now: " + "; ".join(parts) + ". Fix: wait, name a zone "
            "explicitly with `/tpu up ZONE` to try it anyway, or add zones to TPU_ZONES; `/tpu zones` shows the board.")


def _short(error: TpuError) -> str:
    kind = {
        TpuErrorKind.FLEX_START_UNSUPPORTED: "does not offer flex-start for this accelerator",
        TpuErrorKind.NO_CAPACITY: "no capacity",
        TpuErrorKind.QUOTA_EXCEEDED: f"quota exhausted in {error.region}",
        TpuErrorKind.INVALID_ACCELERATOR: "does not offer this accelerator type",
    }.get(error.kind)
    return kind or error.message[:160]


def _until(skip: Skip, now: float) -> str:
    seconds = max(0, int(skip.until - now))
    if seconds >= 86400:
        return f"{seconds // 86400}d{(seconds % 86400) // 3600}h"
    if seconds >= 3600:
        return f"{seconds // 3600}h{(seconds % 3600) // 60:02d}m"
    return f"{seconds // 60}m{seconds % 60:02d}s"


class ZoneOutcomeHook:
    """Feeds the scoreboard from lease milestones: time to ACTIVE, and FAILED before ACTIVE."""

    async def on_active(self, svc: ZoneDeps, lease: Lease) -> None:
        if not lease.queued_at:
            return
        await svc.scoreboard.record_active(lease.zone, (lease.active_at or time.time()) - lease.queued_at,
                                           lease.lease_id)

    async def on_released(self, svc: ZoneDeps, lease: Lease, reason: str) -> None:
        # An accepted QR that failed before ACTIVE: typically still WAITING_FOR_RESOURCES at valid-until.
        if lease.state != LeaseState.FAILED or not lease.queued_at or lease.active_at:
            return
        error = classify_status(None, reason, zone=lease.zone)
        await svc.scoreboard.record_error(lease.zone, error, lease.lease_id)


async def first_choice_zone(svc: ZoneDeps) -> str:
    """The zone a search would try first (from the scoreboard as it stands; no cloud calls)."""
    plan = await svc.scoreboard.order(svc.policy.zones, svc.policy.default_zone)
    return plan.order[0] if plan.order else svc.policy.default_zone
