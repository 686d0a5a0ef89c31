"""The sandbox's emulators as one set (infra/sandbox/emulators.py): the settings a start hands
back, that a configured endpoint is never replaced, and that stopping the set — or a start that
fails inside it — leaves none of them serving."""

from __future__ import annotations

import pytest
import requests

from bot.settings import Settings
from infra.sandbox.emulators import SandboxEmulators

CLOUD_SETTINGS = {"tpu_api_endpoint", "compute_api_endpoint", "quotas_api_endpoint", "secretmanager_api_endpoint",
                  "storage_api_endpoint", "resourcemanager_api_endpoint"}


def serving(url: str) -> bool:
    """Whether anything answers HTTP at `url` (any status: a 404 is still a server)."""
    try:
        requests.get(url, timeout=5)
    except requests.ConnectionError:
        return False
    return True


def test_the_set_hands_back_its_settings_and_stops_every_emulator_it_started():
    with SandboxEmulators() as emulators:
        emulators.start_cloud(project="tpubot-sandbox")
        emulators.start_logging("tpubot-sandbox")
        emulators.start_slack("xoxb-emulators-test")
        urls = dict(emulators.overrides)
        assert set(urls) == CLOUD_SETTINGS | {"logging_api_endpoint", "slack_api_url"}
        assert all(serving(url) for url in urls.values()), urls
    assert [name for name, url in urls.items() if serving(url)] == []


def test_a_start_that_fails_inside_the_set_stops_the_ones_before_it():
    with pytest.raises(OSError), SandboxEmulators() as emulators:
        emulators.start_cloud(project="tpubot-sandbox")
        started = dict(emulators.overrides)
        port = int(started["tpu_api_endpoint"].rsplit(":", 1)[1])
        emulators.start_cloud(project="tpubot-sandbox", tpu_port=port)  # the address is the first one's
    assert [name for name, url in started.items() if serving(url)] == []


def test_an_endpoint_the_settings_name_is_not_replaced(tmp_path):
    settings = Settings.load(tmp_path / "none.env", tpu_api_endpoint="http://127.0.0.1:9/", logging_api_endpoint="")
    with SandboxEmulators() as emulators:
        emulators.start_cloud(project=settings.project)
        emulators.start_logging(settings.project)
        assert set(emulators.unset_in(settings)) == CLOUD_SETTINGS - {"tpu_api_endpoint"} | {"logging_api_endpoint"}
