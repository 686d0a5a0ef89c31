"""The world: TPU queued resources, the zone scoreboard, the startup script and the account its VM
runs as, vLLM endpoint probes, Cloud Logging, Redis state, prices and capacity math, and `sandbox/`
(local emulators of GCP with IAM, Slack's Web API and a vLLM Gemma endpoint, and TPU VMs that run
the startup script).

Imports only third-party libraries and itself; never agent, handlers or bot.
"""
