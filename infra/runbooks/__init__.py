"""Runbooks: Markdown sections (one incident kind each), indexed for search and matched to log lines."""
