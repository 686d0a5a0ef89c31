"""A log file named by path on this machine (`summarize_logs` over MCP), read like a Slack attachment.

The caps are the Slack files' (infra/slack_files.py): at most MAX_LOG_FILE_BYTES on disk and after
gunzip (gzip recognised by its magic bytes, whatever the name). The file is read block by block as
its reader consumes it (infra/gzip_stream.py), so its size does not decide the memory it takes.

A path resolves against the working directory the MCP client started `tpubot mcp` in, symlinks
and `..` followed, and one that lands outside it is refused unless the process was started with
permission (`MCP_READ_OUTSIDE_CWD`): a model that was talked into asking for `~/.ssh/id_rsa` gets
a refusal.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
import contextlib
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from infra.gzip_stream import gunzip_chunks, sniff_gzip
from infra.images import ImageError, PreparedImage, prepare_image
from infra.slack_files import CHUNK_BYTES, MAX_LOG_FILE_BYTES

BINARY_SNIFF_BYTES = 8192
OUTSIDE_SETTING = "MCP_READ_OUTSIDE_CWD"


class LocalFileError(Exception):
    """A file could not be read; the message says what was wrong and what to do instead."""


class NoLocalFiles:
    """The disk of a Slack process: it never reads its own files for a user (only `tpubot mcp`
    and `tpubot shell`'s `!attach` read the files of the person running them)."""

    def open_log(self, path: str) -> contextlib.AbstractContextManager[LocalLog]:
        raise LocalFileError("This bot does not read files from its own disk; attach the file to your message "
                             "(or run `tpubot mcp` on your machine to read local files).")

    def read_image(self, path: str) -> PreparedImage:
        raise LocalFileError(f"{path}: `images` are files on this machine, read only by `tpubot mcp` (and "
                             "`tpubot shell`'s `!attach`); in Slack, attach the screenshots to a mention instead.")


@dataclass(frozen=True)
class LocalLog:
    name: str  # the path to show: relative to the working directory when under it
    chunks: Iterator[bytes]  # the content, decompressed, in pieces of at most 64 KiB


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

    @contextmanager
    def open_log(self, path: str) -> Iterator[LocalLog]:
        """The file at `path`, open for reading; raises LocalFileError on entry (the path rules, a
        missing file, the size on disk) and while its chunks are read (the cap after gunzip, binary
        content, a read error). The file is closed on exit."""
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
            handle = target.open("rb")
        except OSError as error:
            raise LocalFileError(f"Could not read {shown}: {error.strerror or error}.") from None
        with handle:
            compressed, chunks = sniff_gzip(self._blocks(handle, shown))
            if compressed:
                chunks = gunzip_chunks(chunks, self.max_bytes, shown, LocalFileError)
            yield LocalLog(shown, _text_only(chunks, shown))

    def read_image(self, path: str) -> PreparedImage:
        """The image at `path` (the same path rules as a log), checked by its content and resized for
        Gemma 4 (infra/images.py); raises LocalFileError with the reason."""
        target = self.resolve(path)
        shown = self._shown(target)
        if not target.is_file():
            raise LocalFileError(f"No image file at {shown} (resolved from `{path}`). Check the path; relative "
                                 f"paths start at {self.root.resolve()}.")
        try:
            with target.open("rb") as handle:
                return prepare_image(shown, handle)
        except ImageError as error:
            raise LocalFileError(f"{error}.") from None
        except OSError as error:
            raise LocalFileError(f"Could not read {shown}: {error.strerror or error}.") from None

    def _blocks(self, handle: BinaryIO, shown: str) -> Iterator[bytes]:
        read = 0
        while True:
            try:
                block = handle.read(CHUNK_BYTES)
            except OSError as error:
                raise LocalFileError(f"Could not read {shown}: {error.strerror or error}.") from None
            if not block:
                return
            read += len(block)
            if read > self.max_bytes:  # grew while we looked
                raise LocalFileError(f"{shown} is larger than the {self.max_bytes:,}-byte limit.")
            yield block

    def _shown(self, target: Path) -> str:
        root = self.root.resolve()
        return str(target.relative_to(root)) if target.is_relative_to(root) else str(target)


def _text_only(chunks: Iterable[bytes], shown: str) -> Iterator[bytes]:
    """`chunks`, refused when their start has a NUL byte (a core dump, an image: not a log)."""
    chunks = iter(chunks)
    head = b""
    for chunk in chunks:
        head += chunk
        if len(head) >= BINARY_SNIFF_BYTES:
            break
    if b"\x00" in head[:BINARY_SNIFF_BYTES]:
        raise LocalFileError(f"{shown} looks binary (it contains NUL bytes), not a text log: name a text or "
                             ".gz log file.")
    if head:
        yield head
    yield from chunks
