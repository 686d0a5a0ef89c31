"""Where a Cloud Storage bucket keeps its data, as doctor's XLA-cache check needs it: in region R, in
a multi- or dual-region that contains R, or elsewhere.

The Storage JSON API's `Bucket.location` is upper case: a region (`US-WEST4`, `locationType:
"region"`), a multi-region (`US`, `EU`, `ASIA`, `"multi-region"`), a predefined dual-region (`NAM4`,
…, `"dual-region"`) or a configurable dual-region (the multi-region's name with
`customPlacementConfig.dataLocations` listing its two regions). Which regions a multi-region spans
follows cloud.google.com/storage/docs/locations: the US one is the `us-*` regions, EU the
`europe-*` regions inside the European Union (not London's europe-west2 nor Zurich's europe-west6),
ASIA the `asia-*` regions. Only the predefined dual-regions whose pair is certain are listed; an
unknown one counts as elsewhere, which errs on the side of saying so.
"""

from __future__ import annotations

from enum import Enum

_OUTSIDE_EU = {"europe-west2", "europe-west6"}
DUAL_REGIONS = {"NAM4": ("us-central1", "us-east1"), "EUR4": ("europe-north1", "europe-west4"),
                "ASIA1": ("asia-northeast1", "asia-northeast2")}


class Placement(str, Enum):
    IN_REGION = "in the region"
    SPANS_REGION = "in a multi- or dual-region that contains the region"
    ELSEWHERE = "elsewhere"


def placement(bucket: dict, region: str) -> Placement:
    location = str(bucket.get("location") or "").upper()
    region = region.lower()
    if location.lower() == region:
        return Placement.IN_REGION
    data_locations = [str(r).lower() for r in (bucket.get("customPlacementConfig") or {}).get("dataLocations") or []]
    if data_locations:
        return Placement.SPANS_REGION if region in data_locations else Placement.ELSEWHERE
    if region in DUAL_REGIONS.get(location, ()):
        return Placement.SPANS_REGION
    if _in_multi_region(location, region):
        return Placement.SPANS_REGION
    return Placement.ELSEWHERE


def _in_multi_region(location: str, region: str) -> bool:
    if location == "US":
        return region.startswith("us-")
    if location == "EU":
        return region.startswith("europe-") and region not in _OUTSIDE_EU
    if location == "ASIA":
        return region.startswith("asia-")
    return False
