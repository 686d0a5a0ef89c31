"""The brain, one room per idea: `llm/` (the mention agent), `actions/` (the registry every entry
point ends in), `lease/` (one channel's TPU over time), `digest/` (logs cut to a budget); this root
holds only what all of them share: the action context (Actor, Policy, Services), access rules, redaction.

Inside: `llm → actions → lease, digest → root`; the root imports only infra. Never handlers or bot.
"""
