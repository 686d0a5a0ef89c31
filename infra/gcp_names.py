"""The names Google Cloud accepts, checked before any request carries one: zones, label keys and
values, project ids. A name of the wrong shape is otherwise refused only once a job sends it
(a zone typo jammed a channel that way), so settings and `/tpu up` refuse it at start, saying
what to write.

- A zone is its region, a dash and a letter: `us-west4-a` is zone `a` of region `us-west4`
  (cloud.google.com/compute/docs/regions-zones: "the first part of the zone name is the region and
  the second part of the name describes the zone in the region").
- Labels (cloud.google.com/compute/docs/labeling-resources#requirements): at most 64 on a resource;
  keys 1-63 characters starting with a lowercase letter, values 0-63 characters; both only lowercase
  letters, digits, underscores and dashes (international letters count as lowercase letters).
- A project id (cloud.google.com/resource-manager/docs/creating-managing-projects): 6-30 lowercase
  letters, digits and hyphens, starting with a letter and not ending with a hyphen; older ids carry
  a domain prefix (`example.com:my-project`), and APIs take the project number as well.
"""

from __future__ import annotations

import re

ZONE_NAME = re.compile(r"^[a-z]+-[a-z]+[0-9]+-[a-z]$")
# The typo the TPU API will not take: the zone letter run into the region (`us-west4a`).
_RUN_TOGETHER = re.compile(r"^([a-z]+-[a-z]+[0-9]+)-?([a-z])$")
EXAMPLE = "us-west4-a"


def is_zone_name(value: str) -> bool:
    return bool(ZONE_NAME.match(value))


def likely_meant(value: str) -> str | None:
    """The zone name `value` was probably typed for (`us-west4a` -> `us-west4-a`); None if no guess."""
    match = _RUN_TOGETHER.match(value.strip().lower())
    return f"{match.group(1)}-{match.group(2)}" if match else None


def zone_name_problem(value: str) -> str | None:
    """Why `value` is not a zone name and what to write instead, to follow the name of what holds it
    ("TPU_ZONE=us-west4a " + this); None when it is a zone name."""
    if is_zone_name(value):
        return None
    guess = likely_meant(value)
    fix = f"write {guess}" if guess else f"write it like {EXAMPLE}"
    return (f"is not a zone name (a region, a dash and a zone letter, like {EXAMPLE}); {fix} "
            "(cloud.google.com/tpu/docs/regions-zones lists the TPU zones)")


LABEL_LIMIT = 64
LABEL_LENGTH = 63
# The keys infra/tpu.py's bot_labels sets on every QR, which find and attribute the bot's TPUs.
BOT_LABEL_KEYS = ("managed-by", "tpubot-team", "tpubot-channel", "tpubot-lease", "tpubot-holder")
_PROJECT_ID = re.compile(r"^(?:[a-z][a-z0-9.-]*[a-z0-9]:)?[a-z][a-z0-9-]{4,28}[a-z0-9]$")


def _label_character(ch: str) -> bool:
    return ch in "_-" or ch.isdigit() or (ch.isalpha() and not ch.isupper())


def label_problem(key: str, value: str) -> str | None:
    """Why Google would refuse the label `key`=`value`, with what to write; None when it takes it."""
    if not key or len(key) > LABEL_LENGTH:
        return f"the key {key!r} is {len(key)} characters long; a key has 1-{LABEL_LENGTH}"
    if not (key[0].isalpha() and not key[0].isupper()):
        return f"the key {key!r} does not start with a lowercase letter"
    for what, text in (("key", key), ("value", value)):
        bad = next((ch for ch in text if not _label_character(ch)), None)
        if bad is not None:
            fixed = "".join(ch if _label_character(ch) else "-" for ch in text.lower())
            return (f"the {what} {text!r} holds {bad!r}; keys and values hold only lowercase letters, digits, _ "
                    f"and -, so write {fixed!r}")
    if len(value) > LABEL_LENGTH:
        return f"the value of {key!r} is {len(value)} characters long; a value has at most {LABEL_LENGTH}"
    return None


def project_id_problem(value: str) -> str | None:
    """Why `value` is not a project id (or number), with what to write; None when it is one."""
    if value.isdigit() or _PROJECT_ID.match(value):
        return None
    return ("is not a project id (6-30 lowercase letters, digits and hyphens, starting with a letter; the id, "
            "not the project's display name): write it like my-project-123 (`gcloud projects list` shows the ids)")
