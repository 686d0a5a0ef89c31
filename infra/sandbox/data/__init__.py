"""Package data: recorded vendor artifacts the sandbox checks against (each file names its source)."""
