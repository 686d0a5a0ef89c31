"""Slack-facing adapters: parse `/tpu` text, mentions and button payloads, ack fast, enqueue work,
render Block Kit. They call actions and the lease; they never call GCP directly.

May import agent and infra; never bot.
"""
