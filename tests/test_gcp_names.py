"""Names Google accepts (infra/gcp_names.py), checked where the bot takes them, and the sandbox TPU
API refusing what Google refuses (issue 44: a zone typo jammed a channel; labels Google refuses
were accepted by settings and by the sandbox)."""

from __future__ import annotations

import pytest

from infra.gcp_names import BOT_LABEL_KEYS, is_zone_name, label_problem, likely_meant, project_id_problem
from infra.sandbox import tpu_api
from infra.sandbox.world import SEED_V5E_ZONES, SEED_ZONES
from infra.tpu import bot_labels

# cloud.google.com/tpu/docs/regions-zones (the stored copy, types-zones?hl=de, read for issue 44):
# "Alle v5litepod-Konfigurationen" in the US.
DOCUMENTED_US_V5E_ZONES = {"us-central1-a", "us-south1-a", "us-west1-c", "us-west4-a", "us-east5-a", "us-east5-b",
                           "us-east5-c"}


@pytest.mark.parametrize("name", ["us-west4-a", "europe-west4-b", "northamerica-northeast1-c", "me-west1-a",
                                  "asia-southeast1-b", "us-central2-b"])
def test_zone_names_of_every_shape_google_uses_are_taken(name):
    assert is_zone_name(name)


@pytest.mark.parametrize("typed, meant", [("us-west4a", "us-west4-a"), ("US-WEST4-A", "us-west4-a"),
                                          ("us-west4", None), ("uswest4-a", None), ("banana", None)])
def test_a_zone_typo_is_refused_with_the_name_it_was_meant_to_be(typed, meant):
    assert not is_zone_name(typed)
    assert likely_meant(typed) == meant


def test_the_sandbox_zones_are_zone_names_and_its_us_v5e_zones_are_googles():
    for zone in {*tpu_api.DEFAULT_ZONES, *SEED_ZONES}:
        assert is_zone_name(zone), zone
    sandbox_us_v5e = {z for z in {*tpu_api.DEFAULT_ZONES, *SEED_V5E_ZONES} if z.startswith("us-")}
    # us-east1-c is where the seed project's acceleratorTypes list showed v5e (infra/sandbox/world.py),
    # though the page does not list it; every other US v5e zone of the sandbox is on Google's page.
    assert sandbox_us_v5e - {"us-east1-c"} <= DOCUMENTED_US_V5E_ZONES


# (key, value, refused?) — the rules at cloud.google.com/compute/docs/labeling-resources#requirements
LABELS = [
    ("team", "ml", False), ("cost_center", "cc-123", False), ("env", "", False), ("équipe", "données", False),
    ("Team", "ml", True), ("team", "ML", True), ("team", "ml.ops", True), ("1team", "ml", True),
    ("-team", "ml", True), ("team", "x" * 64, True), ("k" * 64, "v", True), ("", "v", True),
]


@pytest.mark.parametrize("key, value, refused", LABELS)
def test_the_settings_and_the_sandbox_refuse_the_same_labels(key, value, refused):
    assert (label_problem(key, value) is not None) is refused
    try:
        tpu_api._validate_labels({key: value})
        sandbox_refused = False
    except tpu_api._ApiError as error:
        sandbox_refused = True
        assert error.http_status == 400 and error.message.startswith("resource labels are invalid: ")
    assert sandbox_refused is refused


def test_the_sandbox_refuses_a_value_in_the_words_the_tpu_api_uses():
    with pytest.raises(tpu_api._ApiError) as refused:
        tpu_api._validate_labels({"test-name": "pt-r1.9-resnet50-mp-func-v3-32-1vm"})
    assert refused.value.message == ('resource labels are invalid: value "pt-r1.9-resnet50-mp-func-v3-32-1vm" contains '
                                     "invalid character '.' at index 5 for key \"test-name\"")


def test_the_bots_own_labels_are_the_reserved_keys_and_google_takes_them():
    labels = bot_labels("T0SANDBOX", "C0SHELL", "0a1b2c3d4e", holder="UALICE")
    assert tuple(labels) == BOT_LABEL_KEYS
    assert all(label_problem(key, value) is None for key, value in labels.items())


@pytest.mark.parametrize("project, ok", [("my-project", True), ("acme-ml-123", True), ("123456789012", True),
                                         ("google.com:my-project", True), ("My Project", False), ("ab", False),
                                         ("my_project", False), ("project-", False), ("1project", False)])
def test_project_ids(project, ok):
    assert (project_id_problem(project) is None) is ok
