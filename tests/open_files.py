"""Which files under a directory this process holds open: how tests see a line spool, which has
no name (an unlinked temporary file shows in /proc as `<dir>/#<inode> (deleted)`)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

needs_proc = pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc (Linux)")


def open_files_under(directory: Path) -> list[str]:
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # closed between listdir and readlink (the listdir's own descriptor)
        if target.startswith(str(directory)):
            found.append(target)
    return found
