"""The life of one channel's TPU lease: provisioning, zone search, watching, model boot, teardown,
expiry, the idle clock, reconcile, receipts, alerts and on-call.

May import the agent root (actor, policy, context, access) and infra; never `agent.llm` or
`agent.actions` (actions call into the lease, not the other way round).
"""
