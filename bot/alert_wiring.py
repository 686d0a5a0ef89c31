"""Composition of the alerting pieces (issue 4): expiry timers, on-call alerts, idle clock,
receipts. bot/wiring.py calls these; settings are read here and nowhere below bot/."""

from __future__ import annotations

from datetime import timedelta

from redis.asyncio import Redis
from slack_sdk.web.async_client import AsyncWebClient

from agent.lease.alerts import alert_kind

from agent.context import AlertSink, Alerting, LeaseHook, NoAlerts

from agent.policy import AlertPolicy
from agent.lease.expiry import ExpiryHook
from agent.lease.idle import IdleHook
from bot.settings import Settings, chip_count
from handlers.alerts import SlackAlertSink, receipt_writer
from infra.metrics import Metrics
from infra.state.alerts import AlertMarks, BenchResults, OnCallStore
from infra.state.usage import UsageStore


def alert_policy_from(settings: Settings) -> AlertPolicy:
    idle = settings.idle_teardown_minutes
    return AlertPolicy(
        lead_times=tuple(settings.alert_lead_times),
        late_after=settings.alert_late_after,
        idle_teardown=timedelta(minutes=idle) if idle > 0 else None,
        idle_check_interval=settings.idle_check_interval,
        provisioning_model="flex-start",  # every QR the bot creates is flex-start (infra/tpu.flex_start_body)
        chips=chip_count(settings.tpu_accelerator_type),
    )


def alerting_from(settings: Settings, redis: Redis, slack_client: AsyncWebClient | None,
                  metrics: Metrics | None = None) -> Alerting:
    sink: AlertSink = NoAlerts()
    if slack_client is not None:
        sink = SlackAlertSink(slack_client, admins=tuple(settings.admins), admin_channel=settings.alert_admin_channel)
    return Alerting(
        policy=alert_policy_from(settings), marks=AlertMarks(redis), oncall=OnCallStore(redis),
        usage=UsageStore(redis), bench=BenchResults(redis), prices=settings.prices, sink=sink,
        admins=tuple(settings.admins),
        # An alert that went nowhere (NoAlerts) is not counted as posted.
        on_posted=(lambda alert: metrics.alerts.labels(alert_kind(alert)).inc())
        if metrics and slack_client is not None else None,
    )


def receipt_for(alerting: Alerting, settings: Settings):
    """The observer's receipt writer: the cost receipt in the lease's thread."""
    return receipt_writer(alerting, settings.tpu_accelerator_type)


def alert_hooks() -> list[LeaseHook]:
    from agent.lease.budget import SpendHook

    return [ExpiryHook(), IdleHook(), SpendHook()]
