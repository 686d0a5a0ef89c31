"""The world: TPU queued resources, the zone scoreboard, the startup script, vLLM endpoint probes,
Cloud Logging, Redis state, prices and capacity math, and `sandbox/` (local emulators of GCP,
Slack's Web API and a vLLM Gemma endpoint).

Imports only third-party libraries and itself; never agent, handlers or bot.
"""
