"""The secret values one agent run must never show: the deployment's own (`Services.redactor`)
plus the model API key of every live lease.

A lease's key (infra/model_keys.py) is random text with no shape a pattern could find, and it
can reach a run as data: vLLM logs its start-up args, key included, to Cloud Logging, and any
channel's tool may read a log line that names another lease's key. So each run's redactor is
built when the run starts, from the leases that exist then.
"""

from __future__ import annotations

import logging

from agent.context import Services
from agent.redact import Redactor
from infra.model_keys import ModelKeyError

log = logging.getLogger(__name__)


async def run_redactor(svc: Services) -> Redactor:
    """`svc.redactor` that also knows every live lease's model key (read now; cached per process)."""
    if svc.model_keys is None:
        return svc.redactor
    keys = []
    for lease in await svc.leases.all():
        try:
            key = await svc.model_keys.key(lease.lease_id)
        except ModelKeyError as error:
            # Not knowable now: the patterns still catch it in vLLM's own `'api_key': [...]` shape.
            log.warning("the model key of lease %s could not be read for redaction: %s", lease.lease_id, error.message)
            continue
        if key:
            keys.append(key)
    return svc.redactor.with_secrets(keys)
