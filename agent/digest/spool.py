"""A line spool: lines kept on disk, not in memory, so a log can be digested more than once.

A mention's attached file is digested for the prompt, again by `summarize_logs`, and maybe again
with a filter; a Cloud Logging read arrives newest first and is digested oldest first. Holding
those lines as Python strings would cost memory in proportion to the log. The spool writes each
line once to an anonymous temporary file (it has no name, so nothing is left behind even by a
killed process) and every iteration reads the file again in blocks: memory is a block and the
longest line, whatever the log's size. Forward and reverse iteration both work, and several
iterations may run at once (each reads at its own offsets with `os.pread`).

Close the spool (it is a context manager) when the job that made it ends, also on error: that
gives the disk space back at once instead of when the object is collected.
"""

from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Iterable, Iterator

BLOCK_BYTES = 64 * 1024
_ENCODING = ("utf-8", "surrogatepass")  # any str round-trips, even a lone surrogate from JSON


class SpoolClosed(ValueError):
    """The spool was read after `close()`."""


class LineSpool:
    """Append lines with `extend`; then `len()`, `iter()` (first to last) and `reversed()`."""

    def __init__(self, *, block_bytes: int = BLOCK_BYTES) -> None:
        self._file = tempfile.TemporaryFile(prefix="tpubot-lines-")
        self._count = 0
        self._block = block_bytes
        self._closing = threading.Lock()  # a read in another thread never meets a half-closed file

    @classmethod
    def filled(cls, lines: Iterable[str], *, block_bytes: int = BLOCK_BYTES) -> LineSpool:
        """A spool of `lines`; when reading them raises, the spool is closed before the error goes on."""
        spool = cls(block_bytes=block_bytes)
        try:
            spool.extend(lines)
        except BaseException:
            spool.close()
            raise
        return spool

    def extend(self, lines: Iterable[str]) -> None:
        write = self._file.write
        for line in lines:
            if "\n" in line:  # one line in, one line out: every later line number depends on it
                line = line.replace("\n", " ")
            write(line.encode(*_ENCODING))
            write(b"\n")
            self._count += 1

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[str]:
        return self._forward(self._written())

    def __reversed__(self) -> Iterator[str]:
        return self._backward(self._written())

    @property
    def closed(self) -> bool:
        return self._file.closed

    def close(self) -> None:
        with self._closing:
            self._file.close()

    def __enter__(self) -> LineSpool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"LineSpool({self._count} lines{', closed' if self.closed else ''})"

    # --- reading ---
    def _written(self) -> int:
        """Bytes written so far, all on disk (what an iteration started now will read)."""
        self._check_open()
        self._file.flush()
        return os.fstat(self._file.fileno()).st_size

    def _check_open(self) -> None:
        if self._file.closed:
            raise SpoolClosed("the line spool was closed: its lines are gone")

    def _read(self, size: int, offset: int) -> bytes:
        with self._closing:
            self._check_open()  # never pread a closed descriptor: its number may be another file's now
            return os.pread(self._file.fileno(), size, offset)

    def _forward(self, size: int) -> Iterator[str]:
        offset = 0
        partial: list[bytes] = []  # the start of a line that continues in the next block
        while offset < size:
            block = self._read(min(self._block, size - offset), offset)
            offset += len(block)
            cut = block.rfind(b"\n")
            if cut < 0:
                partial.append(block)
                continue
            text = b"".join([*partial, block[:cut]]).decode(*_ENCODING)
            partial = [block[cut + 1:]]
            yield from text.split("\n")

    def _backward(self, size: int) -> Iterator[str]:
        if size == 0:
            return
        end = size - 1  # the last line's own "\n"
        later: list[bytes] = []  # the end of a line that began in an earlier block
        while end > 0:
            start = max(0, end - self._block)
            block = self._read(end - start, start)
            end = start
            cut = block.find(b"\n")
            if cut < 0:
                later.insert(0, block)
                continue
            text = b"".join([block[cut + 1:], *later]).decode(*_ENCODING)
            later = [block[:cut]]
            yield from reversed(text.split("\n"))
        yield b"".join(later).decode(*_ENCODING)
