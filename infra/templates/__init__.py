"""Package data: files rendered by infra modules (see infra/startup_script.py)."""
