"""The sandbox's emulators as one set (infra/sandbox/emulators.py): the settings a start hands
back, that a configured endpoint is never replaced, and that stopping the set — or a start that
fails inside it — leaves none of them serving."""

from __future__ import annotations

import pytest
import requests

from bot.settings import Settings
from infra.sandbox.emulators import SandboxEmulators

CLOUD_SETTINGS = {"tpu_api_endpoint", "compute_api_endpoint", "quotas_api_endpoint", "secretmanager_api_endpoint",
                  "storage_api_endpoint", "resourcemanager_api_endpoint", "iam_api_endpoint"}


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


def test_sandbox_help_names_every_emulator_it_starts_and_dev_help_one_port_default():
    """Issue 44: `tpubot sandbox --help` listed four of its five emulators (issue 40 added a sixth, Resource Manager); `tpubot dev --help` gave two
    defaults for --port (0, and "the PORT setting")."""
    from typer.testing import CliRunner

    from bot.cli import app
    from infra.sandbox.world import CloudSandbox, SandboxWorld

    words = {"tpu": "TPU", "compute": "Compute", "quotas": "Quotas", "secretmanager": "Secret Manager",
             "storage": "Storage", "resourcemanager": "Resource Manager", "iam": "IAM"}
    with CloudSandbox(SandboxWorld()) as cloud:
        started = [key.removesuffix("_api_endpoint") for key in cloud.endpoint_overrides()]
    help_text = " ".join(CliRunner().invoke(app, ["sandbox", "--help"], env={"COLUMNS": "200"}).output.split())
    assert all(words[api] in help_text for api in started), (started, help_text)
    dev_help = " ".join(CliRunner().invoke(app, ["dev", "--help"], env={"COLUMNS": "200"}).output.split())
    port = dev_help[dev_help.index("--port"):dev_help.index("--workers")]
    assert "PORT setting" in port and "[default:" not in port, port
