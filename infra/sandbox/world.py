"""The emulated cloud as one description: zones, accelerators, network, quota, secrets, routers, buckets, IAM.

`SandboxWorld` says what the sandbox project looks like; `CloudSandbox` starts the emulators that
serve it (the TPU API, the project-level APIs and the container registry the TPU VMs pull from) and
hands back their endpoints. `tpubot shell`, `tpubot doctor`, the tests and
`benchmarks/zone_search.py` all build their cloud from here.

The default world's IAM is a project set up as the README says: the bot's account with its roles
(infra/sandbox/iam.py, BOT_ROLES), and the TPU VM's account — the project's default Compute Engine
service account — with `roles/editor` (what that account gets in a project created without the
org policy that stops it) and the README's grants: `secretAccessor` on the HF token secret,
`logging.logWriter`, and `storage.objectUser` on every bucket. `iam_grants` replaces those grants.

`seed_world()` is the world the seed project met: TPU quota in 44 zones, v5e offered in eleven of
them, and flex-start v5litepod-1 accepted only in us-west4-a.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from infra.sandbox.gcp_project_api import PREEMPTIBLE_QUOTA_IDS, GcpProjectSandbox
from infra.sandbox.iam import BOT_ROLES, Iam, default_compute_account
from infra.sandbox.registry import RegistryStandIn
from infra.sandbox.tpu_api import DEFAULT_ZONES, V5E_TYPES, V6E_TYPES, TpuSandbox, ZoneBehaviour

DEFAULT_QUOTA_CHIPS = 64  # the default preemptible v5e/v6e quota the flex-start docs mention


def _sandbox_token() -> str:
    return "hf_sandbox" + secrets.token_hex(16)


@dataclass
class SandboxWorld:
    zones: Mapping[str, ZoneBehaviour] = field(default_factory=lambda: dict(DEFAULT_ZONES))
    accelerators: Mapping[str, tuple[str, ...]] | None = None  # zone -> types offered; None: all types
    networks: tuple[str, ...] = ("default",)
    subnetworks: Mapping[str, tuple[str, ...]] | None = None  # region -> names
    quota_chips: Mapping[str, int] | None = None  # zone -> preemptible chips; None: 64 in every zone
    secrets: dict[str, str] = field(default_factory=lambda: {"hf-token": _sandbox_token()})
    # The rule an operator creates for the model port (README): loopback is the sandbox's "bot address".
    firewalls: tuple[dict[str, Any], ...] = (
        {"name": "tpubot-model", "network": "default", "sourceRanges": ["127.0.0.0/8"],
         "allowed": [{"IPProtocol": "tcp"}], "targetTags": ["tpubot-model"]},
    )
    denied: tuple[str, ...] = ()  # IAM permissions the bot's account lacks, e.g. "cloudquotas.quotas.get"
    # Compute Router resources (JSON; `region` and `network` as names), e.g. one with a Cloud NAT in `nats`.
    routers: tuple[dict[str, Any], ...] = ()
    buckets: Mapping[str, str] = field(default_factory=dict)  # Cloud Storage bucket name -> location ("US-WEST4")
    project_number: int = 123456789012
    # (resource, role, member) bindings beside the bot's; None: the README's grants to the TPU VM's
    # default account (see the module docstring). Resources: "project", "secret:NAME", "bucket:NAME",
    # "serviceAccount:EMAIL" (that account's own policy, e.g. roles/iam.serviceAccountUser for the bot).
    iam_grants: tuple[tuple[str, str, str], ...] | None = None
    # The org policy compute.disableGuestAttributesAccess: every VM's guest-attribute writes are refused.
    guest_attributes_disabled: bool = False
    private_google_access: bool = True  # on every subnetwork, as the README asks for internal nodes
    parent: str = ""  # the project's folder or organization ("folders/123", "organizations/456"); "": none
    # Custom roles of the project (`projects/P/roles/NAME` -> permissions), for iam_grants to bind.
    custom_roles: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    bot_roles: tuple[str, ...] = BOT_ROLES  # the bot's account's roles on the project (README)

    @property
    def node_account(self) -> str:
        """The project's default Compute Engine service account (what a TPU VM runs as by default)."""
        return default_compute_account(self.project_number)

    def readme_grants(self) -> tuple[tuple[str, str, str], ...]:
        node = f"serviceAccount:{self.node_account}"
        return (("project", "roles/editor", node), ("project", "roles/logging.logWriter", node),
                *(("secret:" + name, "roles/secretmanager.secretAccessor", node) for name in self.secrets),
                *(("bucket:" + name, "roles/storage.objectUser", node) for name in self.buckets))

    def iam(self, project: str) -> Iam:
        iam = Iam(project, self.project_number, denied=self.denied, bot_roles=self.bot_roles)
        for role, permissions in self.custom_roles.items():
            iam.define_role(role, permissions)
        for resource, role, who in self.readme_grants() if self.iam_grants is None else self.iam_grants:
            kind, _, name = resource.partition(":")
            target = {"project": f"projects/{project}", "secret": f"projects/{project}/secrets/{name}",
                      "bucket": f"projects/_/buckets/{name}", "serviceAccount": iam.account_resource(name)}[kind]
            if kind == "serviceAccount":
                iam.add_account(name)
            iam.grant(target, role, who)
        return iam

    def quotas(self) -> dict[str, dict[str, int]]:
        chips = dict(self.quota_chips) if self.quota_chips is not None else {z: DEFAULT_QUOTA_CHIPS for z in self.zones}
        return {quota_id: dict(chips) for quota_id in PREEMPTIBLE_QUOTA_IDS.values()}


@dataclass
class CloudSandbox:
    """The running emulators of one `SandboxWorld`."""

    world: SandboxWorld
    project: str = "tpubot-sandbox"
    time_scale: float = 1.0
    on_node_ready: Callable[[str, str, dict[str, str]], str | None] | None = None
    on_node_gone: Callable[[str, str], None] | None = None
    tpu: TpuSandbox | None = None
    project_api: GcpProjectSandbox | None = None
    tpu_port: int = 0  # 0: any free port
    registry: RegistryStandIn | None = None  # Docker Hub and Artifact Registry, as the TPU VMs pull from them

    def start(self) -> "CloudSandbox":
        w = self.world
        iam = w.iam(self.project)  # one IAM for both: the TPU API asks it who may act as a node's account
        self.tpu = TpuSandbox(
            zones=dict(w.zones), time_scale=self.time_scale, project=self.project, networks=w.networks,
            subnetworks=None if w.subnetworks is None else [s for names in w.subnetworks.values() for s in names],
            accelerators=w.accelerators, on_node_ready=self.on_node_ready, on_node_gone=self.on_node_gone,
            port=self.tpu_port, iam=iam,
        )
        self.tpu.start()
        self.project_api = GcpProjectSandbox(
            self.project, networks=w.networks, subnetworks=w.subnetworks, quotas=w.quotas(), secrets_=w.secrets,
            firewalls=w.firewalls, routers=w.routers, buckets=w.buckets, project_number=w.project_number,
            iam=iam, private_google_access=w.private_google_access, parent=w.parent,
        )
        self.project_api.start()
        self.registry = RegistryStandIn(iam=self.project_api.iam).start()
        return self

    def stop(self) -> None:
        for server in (self.tpu, self.project_api, self.registry):
            if server is not None:
                server.stop()

    @property
    def registry_url(self) -> str:
        assert self.registry is not None, "started"
        return self.registry.url

    def node_service_account(self, zone: str, node_id: str) -> str:
        """The account a node's VM runs as: the one its create named, else the project's default."""
        assert self.tpu is not None
        return self.tpu.node_service_account(zone, node_id) or self.world.node_account

    def publish(self, zone: str, node_id: str, namespace: str, key: str, value: str) -> None:
        """A node's VM wrote a guest attribute (its metadata server calls this): the TPU API serves it."""
        if self.tpu is not None:
            self.tpu.set_guest_attributes(zone, node_id, namespace, {key: value})

    @property
    def compile_caches(self) -> set[str]:
        """The compile caches the VMs saved (`gs://BUCKET/KEY`, one object `KEY/vllm-cache.tar` each)."""
        if self.project_api is None:
            return set()
        return {f"gs://{bucket}/{name.rsplit('/', 1)[0]}" for bucket, objects in self.project_api.objects.items()
                for name in objects if name.endswith("/vllm-cache.tar")}

    def endpoint_overrides(self) -> dict[str, Any]:
        """The settings that point the bot's real clients at these emulators."""
        assert self.tpu is not None and self.project_api is not None
        base = self.project_api.base_url
        return {"tpu_api_endpoint": self.tpu.base_url, "compute_api_endpoint": base,
                "quotas_api_endpoint": base, "secretmanager_api_endpoint": base, "storage_api_endpoint": base,
                "resourcemanager_api_endpoint": base, "iam_api_endpoint": base}

    def __enter__(self) -> "CloudSandbox":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# --- the seed's world ----------------------------------------------------------------------------

SEED_ZONES = (
    "asia-east1-a", "asia-east1-b", "asia-east1-c", "asia-northeast1-a", "asia-northeast1-b", "asia-northeast1-c",
    "asia-south1-a", "asia-south1-b", "asia-south1-c", "asia-southeast1-a", "asia-southeast1-b",
    "asia-southeast1-c", "australia-southeast1-a", "australia-southeast1-b", "europe-west1-b", "europe-west1-c",
    "europe-west1-d", "europe-west2-a", "europe-west2-b", "europe-west2-c", "europe-west3-a", "europe-west3-b",
    "europe-west4-a", "europe-west4-b", "europe-west4-c", "me-west1-a", "southamerica-east1-c", "us-central1-a",
    "us-central1-b", "us-central1-c", "us-central1-f", "us-central2-b", "us-east1-b", "us-east1-c", "us-east1-d",
    "us-east4-a", "us-east4-b", "us-east4-c", "us-east5-a", "us-east5-b", "us-east5-c", "us-south1-a",
    "us-west1-c", "us-west4-a",
)
SEED_V5E_ZONES = (
    "asia-southeast1-b", "europe-west4-a", "europe-west4-b", "us-central1-a", "us-east1-c", "us-east5-a",
    "us-east5-b", "us-east5-c", "us-south1-a", "us-west1-c", "us-west4-a",
)
SEED_ACCEPTING_ZONE = "us-west4-a"
SEED_DEFAULT_ZONE = "europe-west4-a"


def seed_world() -> SandboxWorld:
    """44 zones with quota; v5e in eleven; flex-start v5litepod-1 accepted only in us-west4-a."""
    return SandboxWorld(
        zones={z: ZoneBehaviour.ACCEPT if z == SEED_ACCEPTING_ZONE else ZoneBehaviour.REJECT_FLEX_START
               for z in SEED_ZONES},
        accelerators={z: V5E_TYPES + V6E_TYPES if z in SEED_V5E_ZONES else V6E_TYPES for z in SEED_ZONES},
        quota_chips={z: DEFAULT_QUOTA_CHIPS for z in SEED_ZONES},
    )
