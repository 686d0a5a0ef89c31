"""A log file named by path on this machine (`summarize_logs` over MCP), read like a Slack attachment.

The caps are the Slack files' (infra/slack_files.py): at most MAX_LOG_FILE_BYTES on disk and after
gunzip (gzip recognised by its magic bytes, whatever the name). A path resolves against the
working directory the MCP client started `tpubot mcp` in, symlinks and `..` followed, and one
that lands outside it is refused unless the process was started with permission
(`MCP_READ_OUTSIDE_CWD`): a model that was talked into asking for `~/.ssh/id_rsa` gets a refusal.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from infra.slack_files import GZIP_MAGIC, MAX_LOG_FILE_BYTES, gunzip_capped

BINARY_SNIFF_BYTES = 8192
OUTSIDE_SETTING = "MCP_READ_OUTSIDE_CWD"


class LocalFileError(Exception):
    """A file could not be read; the message says what was wrong and what to do instead."""


@dataclass(frozen=True)
class LocalFiles:
    root: Path  # the working directory paths are read under
    allow_outside: bool = False
    max_bytes: int = MAX_LOG_FILE_BYTES

    def resolve(self, path: str) -> Path:
        if not path.strip():
            raise LocalFileError("`path` is empty: give a log file's path, e.g. logs/server.log.")
        root = self.root.resolve()
        target = (root / Path(path.strip()).expanduser()).resolve()
        if not self.allow_outside and not target.is_relative_to(root):
            raise LocalFileError(f"{path} is outside the working directory {root}, so it was not read. Copy the "
                                 f"file under {root}, pass its lines as `text`, or start `tpubot mcp` with "
                                 f"{OUTSIDE_SETTING}=true.")
        return target

    def read_lines(self, path: str) -> tuple[str, list[str]]:
        """(the name to show, the file's lines); raises LocalFileError."""
        target = self.resolve(path)
        shown = self._shown(target)
        if not target.exists():
            raise LocalFileError(f"No file at {shown} (resolved from `{path}`). Check the path; relative paths "
                                 f"start at {self.root.resolve()}.")
        if not target.is_file():
            raise LocalFileError(f"{shown} is not a regular file (a directory?): name one log file.")
        size = target.stat().st_size
        if size > self.max_bytes:
            raise LocalFileError(f"{shown} is {size:,} bytes; the limit is {self.max_bytes:,}. Cut the part "
                                 "that matters (e.g. `tail -n 20000`) into a smaller file.")
        try:
            with target.open("rb") as handle:
                data = handle.read(self.max_bytes + 1)
        except OSError as error:
            raise LocalFileError(f"Could not read {shown}: {error.strerror or error}.") from None
        if len(data) > self.max_bytes:  # grew while we looked
            raise LocalFileError(f"{shown} is larger than the {self.max_bytes:,}-byte limit.")
        if data[:2] == GZIP_MAGIC:
            data = gunzip_capped(data, self.max_bytes, shown, LocalFileError)
        if b"\x00" in data[:BINARY_SNIFF_BYTES]:
            raise LocalFileError(f"{shown} looks binary (it contains NUL bytes), not a text log: name a text or "
                                 ".gz log file.")
        return shown, data.decode("utf-8", errors="replace").splitlines()

    def _shown(self, target: Path) -> str:
        root = self.root.resolve()
        return str(target.relative_to(root)) if target.is_relative_to(root) else str(target)
