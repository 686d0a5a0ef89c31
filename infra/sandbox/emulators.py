"""The sandbox's emulators as one running set: started one by one, stopped together.

Every process that runs some of them starts them here — `tpubot shell`, `tpubot dev` and
`tpubot mcp` through bot/local_stack.py, `tpubot doctor`, `tpubot sandbox` — and gets back the
settings that point the bot's real clients at them (`overrides`, by setting name). Stopping
stops every one that started, the last first, and all of them even when one fails to stop; a
`with` block does that also when a later one failed to start.
"""

from __future__ import annotations

import contextlib
from typing import Any, Self

from infra.sandbox.logging_api import LoggingEmulator, generate_entries
from infra.sandbox.node_models import NodeModels
from infra.sandbox.slack_api import SlackApiSandbox
from infra.sandbox.vllm import LatencyModel, VllmEmulator
from infra.sandbox.world import CloudSandbox, SandboxWorld

LOG_ENTRIES = 500  # what the Logging emulator holds for the project: enough to page through
MODEL_LATENCY_SCALE = 0.25  # the stand-alone model answers at a quarter of a v5e's latency: a shell waits less


class SandboxEmulators:
    """The emulators one process runs; each `start_…` starts one and records its settings."""

    def __init__(self) -> None:
        self.cloud: CloudSandbox | None = None
        self.node_models: NodeModels | None = None
        self.logging: LoggingEmulator | None = None
        self.model: VllmEmulator | None = None
        self.slack: SlackApiSandbox | None = None
        self.overrides: dict[str, Any] = {}  # setting name -> the value that points the bot at an emulator
        self._stops = contextlib.ExitStack()

    def start_cloud(self, world: SandboxWorld | None = None, *, project: str, time_scale: float = 1.0,
                    tpu_port: int = 0, node_models: NodeModels | None = None) -> CloudSandbox:
        """The emulated project (TPU API, project-level APIs, the registry); with `node_models`, a sandbox
        TPU VM for every node that becomes ACTIVE, running the node's startup script."""
        cloud = CloudSandbox(world or SandboxWorld(), project=project, time_scale=time_scale, tpu_port=tpu_port,
                             on_node_ready=node_models.on_node_ready if node_models else None,
                             on_node_gone=node_models.on_node_gone if node_models else None)
        if node_models is not None:
            # Registered first, so stopped last: the cloud stops making nodes before their models go.
            self._stops.callback(node_models.stop_all)
            self.node_models = node_models
        cloud.start()
        self._stops.callback(cloud.stop)
        self.cloud = cloud
        self.overrides.update(cloud.endpoint_overrides())
        if node_models is not None:
            node_models.attach(cloud)
        return cloud

    def start_logging(self, project: str) -> LoggingEmulator:
        """Cloud Logging with LOG_ENTRIES generated entries of `project`."""
        self.logging = self._started(LoggingEmulator(project, generate_entries(project, LOG_ENTRIES)).start())
        self.overrides["logging_api_endpoint"] = self.logging.url
        return self.logging

    def start_model(self, *, served_version: str) -> VllmEmulator:
        """One sandbox vLLM (labelled heuristic) as the bot's own model endpoint."""
        model = VllmEmulator(latency=LatencyModel().scaled(MODEL_LATENCY_SCALE), served_version=served_version)
        self.overrides["gemma_base_url"] = model.start()
        self.model = self._started(model)
        return model

    def start_slack(self, token: str) -> SlackApiSandbox:
        """Slack's Web API (and the response_urls beside it), accepting `token`."""
        slack = SlackApiSandbox(token=token)
        self.overrides["slack_api_url"] = slack.start()
        self.slack = self._started(slack)
        return slack

    def unset_in(self, settings: object) -> dict[str, Any]:
        """`overrides` but for the endpoints `settings` already name: a configured one is never replaced."""
        return {name: value for name, value in self.overrides.items() if not getattr(settings, name)}

    def _started(self, emulator: Any) -> Any:
        self._stops.callback(emulator.stop)
        return emulator

    def stop(self) -> None:
        """Stop every emulator started, the last first; an error in one stops the rest, then is raised."""
        self._stops.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
