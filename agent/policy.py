"""The deployment's rules for leases and alerts, as plain values built from Settings in bot/wiring.py.

Imports nothing of ours: the modules that apply these rules import this one, never the reverse.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta


@dataclass(frozen=True)
class Policy:
    zones: tuple[str, ...] = ("us-west4-a",)
    default_zone: str = "us-west4-a"
    accelerator_type: str = "v5litepod-1"
    max_run: timedelta = timedelta(hours=4)  # the length of a lease asked for without one
    shortest_run: timedelta = timedelta(minutes=10)  # MIN_RUN_DURATION
    longest_run: timedelta = timedelta(days=7)  # flex-start's limit
    poll_interval: timedelta = timedelta(seconds=10)
    active_poll_interval: timedelta = timedelta(seconds=60)
    teardown_wait: timedelta = timedelta(minutes=5)
    # Zone search and model boot (issue 3).
    valid_until: timedelta = timedelta(hours=4)  # how long a flex-start request may queue
    search_budget: timedelta = timedelta(minutes=2)  # one provision job's share of a zone search
    model_port: int = 8000
    model_name: str = "google/gemma-4-E2B-it"
    model_boot_timeout: timedelta = timedelta(minutes=60)
    endpoint_address: str = "external"  # "internal": the bot runs in the VPC and calls the node's internal IP
    vllm_image: str = ""  # shown on the READY card
    boot_poll_interval: timedelta = timedelta(seconds=15)
    # A VM that has published no boot phase this long after ACTIVE is named on the card as not reporting.
    model_boot_silence: timedelta = timedelta(minutes=3)
    project: str = ""  # the GCP project (the fixes the card gives name it)


@dataclass(frozen=True)
class AlertPolicy:
    lead_times: tuple[timedelta, ...] = (timedelta(minutes=30), timedelta(minutes=5))
    late_after: timedelta = timedelta(minutes=1)  # an alert this long after its time is marked late
    idle_teardown: timedelta | None = None  # None: the idle clock never tears down
    idle_check_interval: timedelta = timedelta(minutes=1)
    provisioning_model: str = "flex-start"  # which price applies to the bot's TPUs
    chips: int = 1

    @property
    def idle_warning_lead(self) -> timedelta:
        """The idle warning comes this long before idle teardown (the shortest deadline lead)."""
        lead = min(self.lead_times) if self.lead_times else timedelta(minutes=5)
        if self.idle_teardown is not None:
            lead = min(lead, self.idle_teardown / 2)
        return lead
