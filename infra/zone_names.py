"""What a Google Cloud zone name looks like, checked before any request names one.

A zone is its region, a dash and a letter: `us-west4-a` is zone `a` of region `us-west4`
(cloud.google.com/compute/docs/regions-zones: "the first part of the zone name is the region and
the second part of the name describes the zone in the region"). The TPU API answers a name of
any other shape with a 400 about an unsupported zone only once a job asks, so settings and `/tpu up`
refuse it at once, with the name it was probably meant to be.
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
