"""The mention agent: the tool loop over the Gemma endpoint, the prompt, Gemma 4 call syntax and
completion repair, tool arguments, the model endpoint, the model-less answer, intents, proposals.

May import `agent.actions` (its only way to a lease), `agent.digest`, the agent root and infra;
nothing in the agent imports this package.
"""
