"""Where runbooks come from — the built-in ones, a team folder (`RUNBOOKS_DIR`) and Markdown URLs
(`RUNBOOKS_URLS`) — and keeping the index current without a restart.

A folder is re-read when a file in it is added, removed or changed (a stat per file per search);
a URL is fetched again once its copy is older than `url_refresh_seconds`, with its ETag, and a
failed fetch keeps the last copy (and says so in `problems`).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from infra.runbooks.index import RunbookIndex
from infra.runbooks.sections import ParsedFile, Section, parse_runbook

log = logging.getLogger(__name__)

URL_REFRESH_SECONDS = 60.0
URL_TIMEOUT_SECONDS = 10.0
MAX_RUNBOOK_BYTES = 1_000_000


def builtin_dir() -> Path:
    return Path(str(resources.files("infra.runbooks") / "builtin"))


@dataclass
class _UrlCopy:
    text: str = ""
    etag: str = ""
    fetched_at: float = 0.0


@dataclass
class RunbookLibrary:
    folders: list[Path]
    urls: list[str] = field(default_factory=list)
    url_refresh_seconds: float = URL_REFRESH_SECONDS
    _read_problems: list[str] = field(default_factory=list)
    _fetch_problems: dict[str, str] = field(default_factory=dict)
    _index: RunbookIndex | None = None
    _signature: tuple = ()
    _copies: dict[str, _UrlCopy] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _fetch_lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        # Every URL has its copy from the start: a fetch changes copies, never the dict's size,
        # so an index can be built while another thread fetches.
        for url in self.urls:
            self._copies.setdefault(url, _UrlCopy(fetched_at=-math.inf))

    @classmethod
    def from_settings(cls, team_dir: str = "", urls: list[str] | None = None) -> RunbookLibrary:
        folders = [builtin_dir()] + ([Path(team_dir)] if team_dir else [])
        return cls(folders=folders, urls=list(urls or []))

    @property
    def problems(self) -> list[str]:
        """What could not be read or fetched, and sections that replace others."""
        return self._read_problems + list(self._fetch_problems.values())

    def index(self) -> RunbookIndex:
        """The index over every source as it is now (re-built only when something changed)."""
        # One caller fetches the URLs that are due; the others go on with the last copies instead
        # of queueing behind a slow server (only the very first index waits for its fetch).
        if self._fetch_lock.acquire(blocking=self._index is None):
            try:
                self._refresh_urls()
            finally:
                self._fetch_lock.release()
        with self._lock:
            signature = self._files_signature() + tuple((url, c.etag, hash(c.text)) for url, c in self._copies.items())
            if self._index is None or signature != self._signature:
                self._index = RunbookIndex(self._read_all())
                self._signature = signature
            return self._index

    def _files(self) -> list[tuple[Path, Path]]:
        files = []
        for folder in self.folders:
            if folder.is_dir():
                files += [(folder, path) for path in sorted(folder.rglob("*.md")) if path.is_file()]
        return files

    def _files_signature(self) -> tuple:
        signature = []
        for _, path in self._files():
            try:
                stat = path.stat()
            except OSError:
                continue
            signature.append((str(path), stat.st_mtime_ns, stat.st_size))
        return tuple(signature)

    def _read_all(self) -> list[Section]:
        problems: list[str] = []
        sections: dict[str, Section] = {}
        for folder, path in self._files():
            origin = "built-in" if folder == builtin_dir() else str(path)
            try:
                if path.stat().st_size > MAX_RUNBOOK_BYTES:
                    problems.append(f"{path}: over {MAX_RUNBOOK_BYTES:,} bytes, not read")
                    continue
                text = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as error:
                problems.append(f"{path}: not readable ({error})")
                continue
            self._add(sections, problems, parse_runbook(path.stem, text, origin))
        for url, copy in self._copies.items():
            if copy.text:
                self._add(sections, problems, parse_runbook(_url_stem(url), copy.text, display_url(url)))
        self._read_problems = problems
        for problem in problems:
            log.warning("runbooks: %s", problem)
        return list(sections.values())

    @staticmethod
    def _add(sections: dict[str, Section], problems: list[str], parsed: ParsedFile) -> None:
        problems += parsed.problems
        for section in parsed.sections:
            if section.cite in sections:
                # A team's section of the same file stem and title replaces the built-in one.
                problems.append(f"{section.origin}: {section.cite} replaces the one from {sections[section.cite].origin}")
            sections[section.cite] = section

    def _refresh_urls(self) -> None:
        now = time.monotonic()
        due = [url for url in self.urls
               if now - self._copies.get(url, _UrlCopy()).fetched_at >= self.url_refresh_seconds
               or url not in self._copies]
        if not due:
            return
        with httpx.Client(timeout=URL_TIMEOUT_SECONDS, follow_redirects=True) as client:
            for url in due:
                copy = self._copies.setdefault(url, _UrlCopy())
                copy.fetched_at = now
                try:
                    response = client.get(url, headers={"If-None-Match": copy.etag} if copy.etag else {})
                    if response.status_code == 304:
                        self._fetch_problems.pop(url, None)
                        continue
                    response.raise_for_status()
                    if len(response.content) > MAX_RUNBOOK_BYTES:
                        raise ValueError(f"over {MAX_RUNBOOK_BYTES:,} bytes")
                    copy.text, copy.etag = response.text, response.headers.get("etag", "")
                    self._fetch_problems.pop(url, None)
                except (httpx.HTTPError, ValueError) as error:
                    kept = "keeping the last copy" if copy.text else "nothing read from it yet"
                    shown, why = display_url(url), str(error).replace(url, display_url(url))
                    self._fetch_problems[url] = f"fetch {shown}: {type(error).__name__}: {why} ({kept})"
                    log.warning("runbooks: could not fetch %s (%s); %s", shown, why, kept)


def display_url(url: str) -> str:
    """A runbook URL as it may be shown (logs, problems, the model, Slack): a token in its query or
    credentials before its host authenticate the fetch and are nobody's to read."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = host + (f":{parts.port}" if parts.port else "")
    return f"{parts.scheme}://{netloc}{parts.path}"


def _url_stem(url: str) -> str:
    name = Path(urlsplit(url).path).name or urlsplit(url).netloc
    return name.removesuffix(".md") or "runbook"
