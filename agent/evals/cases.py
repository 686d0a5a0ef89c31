"""Eval incidents: a mention, its logs, and what a correct answer must hold (docs/eval.md).

One TOML file per incident (`agent/evals/incidents/*.toml`, and a team's own folder), naming the
public sources its log lines were copied from. Held-back variations are made from a seed: the
timestamps moved, noise lines put at other places, and a secret planted in the noise in one of
the forms real logs leak them (agent/evals/secrets.py), with the evidence line numbers carried
along, so a set that was tuned to the shipped files can be checked on logs it has not seen.
"""

from __future__ import annotations

import random
import re
import tomllib
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from importlib import resources
from pathlib import Path

from agent.evals.secrets import planted_secret


class IncidentError(ValueError):
    """An incident file that cannot be used; the message names the file and the field."""


@dataclass(frozen=True)
class Incident:
    id: str
    kind: str
    mention: str
    logs: tuple[str, ...]
    facts: tuple[str, ...]
    evidence_lines: tuple[int, ...]
    runbooks: tuple[str, ...] = ()
    forbidden: tuple[str, ...] = ()
    secrets: tuple[str, ...] = ()  # values in the logs an answer must never echo (declared, or planted)
    related: tuple[str, ...] = ()  # runbooks an answer may cite without earning or losing for them
    sources: tuple[str, ...] = ()  # where the log lines were copied from
    variation: int = 0  # 0: the file as written
    origin: str = ""

    @property
    def name(self) -> str:
        return self.id if not self.variation else f"{self.id}~{self.variation}"


def shipped_dir() -> Path:
    return Path(str(resources.files("agent.evals") / "incidents"))


def load_incidents(folders: list[Path]) -> list[Incident]:
    incidents: list[Incident] = []
    for folder in folders:
        for path in sorted(folder.glob("*.toml")):
            incidents.append(parse_incident(path.read_text(encoding="utf-8"), str(path)))
    seen: set[str] = set()
    for incident in incidents:
        if incident.id in seen:
            raise IncidentError(f"{incident.origin}: id {incident.id!r} is used by another incident; ids are unique")
        seen.add(incident.id)
    return incidents


def parse_incident(text: str, origin: str) -> Incident:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise IncidentError(f"{origin}: not TOML ({error})") from None
    expect = data.get("expect") or {}
    logs = tuple(str(data.get("logs", "")).strip("\n").splitlines())
    for key in ("id", "kind", "mention"):
        if not isinstance(data.get(key), str) or not data[key].strip():
            raise IncidentError(f"{origin}: `{key}` must be a non-empty string")
    if not logs:
        raise IncidentError(f"{origin}: `logs` is empty")
    evidence = tuple(int(n) for n in expect.get("evidence_lines", []))
    outside = [n for n in evidence if not 1 <= n <= len(logs)]
    if outside:
        raise IncidentError(f"{origin}: evidence_lines {outside} are outside the {len(logs)} log lines")
    facts = tuple(str(f) for f in expect.get("facts", []))
    for fact in facts:
        try:
            re.compile(fact)
        except re.error as error:
            raise IncidentError(f"{origin}: fact {fact!r} is not a regular expression ({error})") from None
    secrets = _strings(expect, "secrets", origin)
    absent = [secret for secret in secrets if not any(secret in line for line in logs)]
    if absent:
        raise IncidentError(f"{origin}: secrets {absent} are not in the logs; declare the values as the logs print them")
    return Incident(id=data["id"], kind=data["kind"], mention=data["mention"], logs=logs, facts=facts,
                    evidence_lines=evidence, runbooks=_strings(expect, "runbooks", origin),
                    forbidden=_strings(expect, "forbidden", origin), secrets=secrets,
                    related=_strings(expect, "related", origin), sources=_strings(data, "sources", origin),
                    origin=origin)


def _strings(table: dict, key: str, origin: str) -> tuple[str, ...]:
    value = table.get(key, [])
    if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
        raise IncidentError(f"{origin}: `{key}` must be a list of non-empty strings")
    return tuple(value)


# --- held-back variations ------------------------------------------------------------------

_TIMESTAMP = re.compile(r"(?P<date>\d{4}-\d{2}-\d{2})[T ](?P<time>\d{2}:\d{2}:\d{2})")
NOISE = (
    "INFO healthcheck: GET /healthz 200 in {ms} ms",
    "INFO scheduler: heartbeat ok (queue depth {n})",
    "DEBUG cache: evicted {n} entries (size {ms} KiB)",
    "INFO api: request {n} ok in {ms} ms",
    "INFO metrics: exported {n} series",
)


def variations(incident: Incident, *, seed: int, count: int) -> list[Incident]:
    """`count` variants of `incident`, the same for the same seed."""
    out = []
    for number in range(1, count + 1):
        rng = random.Random(f"{seed}:{incident.id}:{number}")
        out.append(_variant(incident, rng, number))
    return out


def _variant(incident: Incident, rng: random.Random, number: int) -> Incident:
    shift = timedelta(days=rng.randint(1, 400), hours=rng.randint(0, 23), minutes=rng.randint(0, 59))
    evidence = set(incident.evidence_lines)
    lines: list[str] = []
    moved_evidence: list[int] = []
    leak = planted_secret(rng)
    secret_at = rng.randrange(len(incident.logs) + 1)
    noise_at = set(rng.sample(range(len(incident.logs) + 1), k=min(len(incident.logs) + 1, rng.randint(3, 8))))
    for index in range(len(incident.logs) + 1):
        stamp = _stamp_near(incident.logs, index)
        if index in noise_at:
            lines.append(_shifted(f"{stamp}{rng.choice(NOISE).format(n=rng.randint(1, 999), ms=rng.randint(1, 900))}", shift))
        if index == secret_at:
            lines.append(_shifted(f"{stamp}{leak.line}", shift))
        if index < len(incident.logs):
            lines.append(_shifted(incident.logs[index], shift))
            if index + 1 in evidence:
                moved_evidence.append(len(lines))
    return replace(incident, logs=tuple(lines), evidence_lines=tuple(moved_evidence),
                   secrets=incident.secrets + (leak.secret,), variation=number)


def _stamp_near(logs: tuple[str, ...], index: int) -> str:
    """The timestamp of the line at (or before) `index`, as a prefix for an inserted line."""
    for line in (logs[min(index, len(logs) - 1)], logs[max(index - 1, 0)]):
        match = _TIMESTAMP.match(line)
        if match:
            return match.group(0) + ("Z " if line[match.end():match.end() + 1] == "Z" else " ")
    return ""


def _shifted(line: str, shift: timedelta) -> str:
    def move(match: re.Match[str]) -> str:
        try:
            when = datetime.strptime(f"{match['date']} {match['time']}", "%Y-%m-%d %H:%M:%S") + shift
        except ValueError:
            return match.group(0)
        separator = match.group(0)[10]
        return when.strftime(f"%Y-%m-%d{separator}%H:%M:%S")

    return _TIMESTAMP.sub(move, line)
