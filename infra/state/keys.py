"""Redis key names, in one place so every process agrees on them."""

import hashlib

PREFIX = "tpubot"


def lease(team: str, channel: str) -> str:
    return f"{PREFIX}:lease:{team}:{channel}"


def fence(team: str, channel: str) -> str:
    return f"{PREFIX}:fence:{team}:{channel}"


def lease_index() -> str:
    return f"{PREFIX}:leases"


def release_note(lease_id: str) -> str:
    return f"{PREFIX}:released:{lease_id}"


def release_notes() -> str:
    return f"{PREFIX}:released"


def last_release(team: str, channel: str) -> str:
    """How the channel's last lease ended, kept for `/tpu status` after the lease is gone."""
    return f"{PREFIX}:last-release:{team}:{channel}"


def lock(team: str, channel: str) -> str:
    return f"{PREFIX}:lock:{team}:{channel}"


def lock_pattern() -> str:
    """A SCAN pattern for every operation lock."""
    return f"{PREFIX}:lock:*"


def dedupe(kind: str, value: str) -> str:
    return f"{PREFIX}:dedupe:{kind}:{value}"


def audit_stream() -> str:
    return f"{PREFIX}:audit"


def alert_mark(lease_id: str, kind: str) -> str:
    return f"{PREFIX}:alert:{lease_id}:{kind}"


def alert_acks(lease_id: str) -> str:
    return f"{PREFIX}:acks:{lease_id}"


def oncall(team: str, channel: str) -> str:
    return f"{PREFIX}:oncall:{team}:{channel}"


def usage(lease_id: str) -> str:
    return f"{PREFIX}:usage:{lease_id}"


def bench_result(team: str, channel: str) -> str:
    return f"{PREFIX}:bench:{team}:{channel}"


# --- spend ledger and budgets (issue 21; infra/state/spend.py) ---


def budget_limits(team: str) -> str:
    return f"{PREFIX}:budget:{team}"


def spend_ledger(team: str, month: str) -> str:
    return f"{PREFIX}:spend:{team}:{month}"


def spend_open(team: str, month: str) -> str:
    return f"{PREFIX}:spend:{team}:{month}:open"


def spend_settled(team: str, month: str) -> str:
    return f"{PREFIX}:spend:{team}:{month}:settled"


def spend_receipts() -> str:
    return f"{PREFIX}:receipts"


def membership(team: str, channel: str) -> str:
    return f"{PREFIX}:member:{team}:{channel}"



# The job queue's bookkeeping sits beside arq's own keys (arq:in-progress:…, arq:retry:…): it is
# not the bot's state, and a request that changes nothing leaves every tpubot:* key as it was.
JOB_BOOKKEEPING_PREFIX = "arq:tpubot"


def worker_alive(worker_id: str) -> str:
    """Present while the worker process `worker_id` is alive (a short TTL, refreshed by it)."""
    return f"{JOB_BOOKKEEPING_PREFIX}:alive:{worker_id}"


def job_owner(job_id: str) -> str:
    """Which worker process runs arq job `job_id` (so a dead one's job can be taken over)."""
    return f"{JOB_BOOKKEEPING_PREFIX}:owner:{job_id}"


def incident(source: str, key: str) -> str:
    """An alert webhook's incident; `key` is the vendor's (Alertmanager group keys hold any text)."""
    return f"{PREFIX}:incident:{source}:{hashlib.sha256(key.encode()).hexdigest()[:32]}"


def incident_resolved(source: str, key: str) -> str:
    """A resolve that came before its incident was opened, for the open to find."""
    return f"{PREFIX}:incident-resolved:{source}:{hashlib.sha256(key.encode()).hexdigest()[:32]}"


def storm_scope(route: str, severity: str) -> str:
    """What one storm limit counts over: an ALERT_ROUTES rule and one severity (any text, hashed)."""
    return hashlib.sha256(f"{route}\0{severity}".encode()).hexdigest()[:32]


def incident_window(scope: str, window: int) -> str:
    return f"{PREFIX}:incident-window:{scope}:{window}"


def incident_folded(scope: str, window: int) -> str:
    return f"{PREFIX}:incident-folded:{scope}:{window}"


def incident_folded_sources(scope: str, window: int) -> str:
    """How many of a window's folded alerts each source sent."""
    return f"{PREFIX}:incident-folded-by:{scope}:{window}"


def incident_storm_message(scope: str, window: int) -> str:
    return f"{PREFIX}:incident-storm:{scope}:{window}"


def followed_thread(team: str, channel: str, thread_ts: str) -> str:
    return f"{PREFIX}:followed:{team}:{channel}:{thread_ts}"


def rated_answer(answer_id: str) -> str:
    return f"{PREFIX}:answer:{answer_id}"


def answer_votes(answer_id: str) -> str:
    return f"{PREFIX}:answer-votes:{answer_id}"


def answer_input(answer_id: str) -> str:
    """What an answer was made from (its request and the first log lines), kept for an eval case."""
    return f"{PREFIX}:answer-input:{answer_id}"


def awaiting_correction(team: str, channel: str, thread_ts: str, user: str) -> str:
    """Set by a 👎: that person's next reply in the thread is the answer's correction."""
    return f"{PREFIX}:awaiting-correction:{team}:{channel}:{thread_ts}:{user}"


def rated_answers() -> str:
    return f"{PREFIX}:rated-answers"


def memory_thread(team: str, channel: str, thread_ts: str) -> str:
    return f"{PREFIX}:memory:thread:{team}:{channel}:{thread_ts}"


def memory_signature(team: str, signature: str) -> str:
    return f"{PREFIX}:memory:template:{team}:{signature}"
