"""Preflight checks (`tpubot doctor`): will a `/tpu up` with these settings work at all?

Each check calls the real API with the bot's own credentials and returns pass/fail with the fix:

- credentials work (Application Default Credentials refresh);
- the project is reachable (the TPU API lists the default zone's accelerator types, and offers the
  configured one there);
- the VPC network (unset → `default`) and, when set, the subnetwork exist (Compute API);
- a firewall rule admits the bot's address (`MODEL_SOURCE_RANGES`) to the node's network tag on the
  model port (Compute API); when none does, the exact `gcloud compute firewall-rules create …`;
- the HF token secret exists and is readable (Secret Manager; the value is never printed or kept);
- preemptible TPU quota in the default zone is above zero (Cloud Quotas API; flex-start draws on
  the preemptible quota). Quota is necessary, never sufficient: it says nothing about capacity;
- the TPU VM's service account (TPU_SERVICE_ACCOUNT, else the project's default Compute Engine
  account, by the project's number from Resource Manager) can read the HF token secret: a role
  that reads secrets bound to it on the secret or on the project (infra/node_account.py);
- with TPU_SERVICE_ACCOUNT set: the bot may act as that account (IAM's `testIamPermissions` on it,
  for `iam.serviceAccounts.actAs`), without which Google refuses to create a TPU that runs as it;
- with ENDPOINT_ADDRESS=internal (a node without an external IP): the network has a Cloud NAT in the
  zone's region (Compute `routers.list` of that region: a router of the network with a `nats[]`
  entry covering the subnetwork) — the weights come from Hugging Face whatever registry the image
  is in — else the `gcloud compute routers create … && gcloud compute routers nats create …` fix; a
  Docker Hub image is a warning (10 anonymous pulls an hour per address, one NAT address for every
  node: mirror it into Artifact Registry in the region); and the node's subnetwork has Private
  Google Access (Compute `subnetworks.get` → `privateIpGoogleAccess`), without which it reaches
  neither Secret Manager nor Storage nor Artifact Registry;
- with XLA_CACHE_BUCKET set: the bucket exists and keeps its data in the TPU's region (Storage JSON
  API `buckets.get` → `location`); a multi- or dual-region that contains the region is a warning.

A denied permission (HTTP 403, which google-api-core raises as `Forbidden` over REST) is reported
with the role that grants it, never as "enable the API".

The verdict is cached in Redis (`PreflightStore`) under a fingerprint of the settings it checked,
including which API endpoints answered (Google's, or local emulators); `/tpu up` consults it
(`PreflightGate`) and explains what to fix instead of searching zones.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import re
import shlex
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from urllib.parse import urlsplit

import requests
from google.api_core import exceptions as gexc
from google.auth import exceptions as auth_exc
from google.auth.credentials import Credentials
from google.auth.transport.requests import AuthorizedSession
from redis.asyncio import Redis

from infra.deployment_mode import DeploymentMode
from infra.node_account import error_message
from infra.startup_script import secret_version
from infra.state import keys
from infra.tpu_errors import TpuErrorKind, act_as_fix, region_of
from infra.vllm_images import DOCKER_HUB, image_registry

CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"
COMPUTE_ENDPOINT = "https://compute.googleapis.com"
STORAGE_ENDPOINT = "https://storage.googleapis.com"
IAM_ENDPOINT = "https://iam.googleapis.com"
ACT_AS = "iam.serviceAccounts.actAs"
_ARTIFACT_REGISTRY = re.compile(r"^(?P<location>[a-z0-9-]+)-docker\.pkg\.dev/")
QUOTA_SERVICE = "tpu.googleapis.com"
PREEMPTIBLE_QUOTA_IDS = {
    "v5litepod": "TPUV5sPreemptibleLitepodPerProjectPerZoneForTPUAPI",
    "v6e": "TPUV6EPreemptiblePerProjectPerZoneForTPUAPI",
}
CALL_TIMEOUT = 15.0


@dataclass(frozen=True)
class PreflightConfig:
    project: str
    zone: str
    accelerator: str = "v5litepod-1"
    network: str = ""
    subnetwork: str = ""
    hf_token_secret: str = "hf-token"
    mode: DeploymentMode = DeploymentMode.CLOUD  # SANDBOX: anonymous credentials against the local emulators
    tpu_endpoint: str = ""
    compute_endpoint: str = ""
    quotas_endpoint: str = ""
    secretmanager_endpoint: str = ""
    model_port: int = 8000
    network_tag: str = "tpubot-model"
    model_source_ranges: tuple[str, ...] = ()
    endpoint_address: str = "external"
    vllm_image: str = ""
    xla_cache_bucket: str = ""
    storage_endpoint: str = ""
    resourcemanager_endpoint: str = ""
    tpu_service_account: str = ""
    iam_endpoint: str = ""

    @property
    def network_name(self) -> str:
        return self.network or "default"

    @property
    def secret_version(self) -> str:
        return secret_version(self.project, self.hf_token_secret)

    def fingerprint(self) -> str:
        """What the verdict depends on, including which endpoint set answered (see `endpoint_kind`)."""
        sandbox = self.mode.target.emulated_apis
        endpoints = [endpoint_kind(e) for e in (self.tpu_endpoint, self.compute_endpoint, self.quotas_endpoint,
                                                  self.secretmanager_endpoint, self.storage_endpoint)]
        basis = [self.project, self.zone, self.accelerator, self.network_name, self.subnetwork, self.hf_token_secret,
                 # The sandbox's rule admits every port, and its model port moves when 8000 is taken.
                 None if sandbox else self.model_port, self.network_tag, sorted(self.model_source_ranges), sandbox, endpoints,
                 self.endpoint_address, self.vllm_image, self.xla_cache_bucket, self.tpu_service_account,
                 endpoint_kind(self.resourcemanager_endpoint), endpoint_kind(self.iam_endpoint)]
        return hashlib.sha1(json.dumps(basis).encode()).hexdigest()[:16]


def endpoint_kind(endpoint: str) -> str:
    """`google` (unset), `local` (an emulator on this machine: its port moves every run) or the URL."""
    if not endpoint:
        return "google"
    host = urlsplit(endpoint if "://" in endpoint else f"//{endpoint}").hostname or ""
    if host == "localhost" or (host.replace(".", "").isdigit() and ipaddress.ip_address(host).is_loopback):
        return "local"
    return endpoint.rstrip("/")


@dataclass(frozen=True)
class CheckResult:
    name: str
    ok: bool
    detail: str
    fix: str = ""
    warning: bool = False  # passed, but not as it should be (doctor prints WARN and the fix)
    skipped: bool = False  # not run, because a check it needs failed: not ok, yet not a failure of its own


@dataclass
class PreflightReport:
    checks: list[CheckResult]
    fingerprint: str = ""
    checked_at: float = field(default_factory=time.time)

    @property
    def ok(self) -> bool:
        return all(check.ok for check in self.checks)

    @property
    def failures(self) -> list[CheckResult]:
        return [check for check in self.checks if not check.ok and not check.skipped]

    def to_json(self) -> str:
        return json.dumps({"checks": [asdict(c) for c in self.checks], "fingerprint": self.fingerprint,
                           "checked_at": self.checked_at})

    @classmethod
    def from_json(cls, raw: bytes | str) -> "PreflightReport":
        data = json.loads(raw)
        return cls([CheckResult(**c) for c in data["checks"]], data.get("fingerprint", ""),
                   float(data.get("checked_at", 0)))


# --- the checks -----------------------------------------------------------------------------------

def run_preflight(config: PreflightConfig, credentials: Credentials | None = None,
                  extra: list[CheckResult] | None = None) -> PreflightReport:
    """Run every check in order; a failed credentials check skips the ones that need them."""
    checks = list(extra or [])
    creds, result = check_credentials(config, credentials)
    checks.append(result)
    if creds is None:
        for name in ("project", "network", "model firewall", "hf token secret", "tpu quota", "tpu vm account",
                     "bot permissions",
                     *(name for name, applies, _ in CONDITIONAL_CHECKS if applies(config))):
            # The fix is the credentials' own, printed once above: six copies of it read as six problems.
            checks.append(CheckResult(name, False, "not checked: it needs the credentials above to work", skipped=True))
    else:
        checks += [check(config, creds) for check in CHECKS]
        checks += [check(config, creds) for _, applies, check in CONDITIONAL_CHECKS if applies(config)]
    return PreflightReport(checks, config.fingerprint())


def check_credentials(config: PreflightConfig, credentials: Credentials | None) -> tuple[Credentials | None, CheckResult]:
    if credentials is not None:
        kind = "anonymous (sandbox)" if config.mode.target.anonymous else type(credentials).__name__
        return credentials, CheckResult("credentials", True, f"using {kind} credentials")
    if config.mode.target.anonymous:
        return config.mode.credentials(), CheckResult("credentials", True,
                                                      "sandbox: anonymous credentials against the local emulators")
    from infra.gcp_credentials import ADC_FIX as fix
    try:
        import google.auth
        from google.auth.transport.requests import Request

        creds, _ = google.auth.default(scopes=[CLOUD_PLATFORM_SCOPE])
        creds.refresh(Request())
    except auth_exc.GoogleAuthError as error:
        return None, CheckResult("credentials", False, f"Application Default Credentials do not work: {error}", fix)
    return creds, CheckResult("credentials", True,
                              f"Application Default Credentials work ({account_email(creds) or type(creds).__name__})")


def account_email(credentials: Credentials) -> str:
    """The email of the account the credentials act for, where they carry one (a service account's)."""
    return getattr(credentials, "service_account_email", None) or getattr(credentials, "signer_email", None) or ""


def check_project(config: PreflightConfig, credentials: Credentials) -> CheckResult:
    from infra.tpu import TpuConfig, TpuError, TpuService

    try:
        with TpuService(TpuConfig(project=config.project, api_endpoint=config.tpu_endpoint, timeout=CALL_TIMEOUT),
                        credentials=credentials, max_attempts=2) as tpu:
            offered = tpu.list_accelerator_types(config.zone)
    except TpuError as error:
        if error.kind is TpuErrorKind.UNAVAILABLE:
            # Nothing answered: neither the project nor the API's switch is the problem.
            where = config.tpu_endpoint or "https://tpu.googleapis.com"
            return CheckResult("project", False, f"cannot reach the TPU API at {where} ({_connection_reason(error)})",
                               "start what TPU_API_ENDPOINT names (`tpubot sandbox` prints the URL of its emulator), "
                               "or unset it" if config.tpu_endpoint else
                               "check that this machine reaches tpu.googleapis.com:443 (network, proxy, firewall)")
        return CheckResult("project", False, f"the TPU API refused project {config.project} in {config.zone}: "
                                             f"{error.message}",
                           error.fix or f"check GCP_PROJECT={config.project}, enable the Cloud TPU API there "
                                        "(`gcloud services enable tpu.googleapis.com`) and grant the bot's account "
                                        "roles/tpu.admin")
    if config.accelerator not in offered:
        return CheckResult("project", False, f"project {config.project} is reachable, but {config.zone} does not "
                                             f"offer {config.accelerator}",
                           f"set TPU_ZONE to a zone that offers {config.accelerator} (`gcloud compute tpus "
                           f"accelerator-types list --zone ZONE`)")
    return CheckResult("project", True, f"project {config.project} is reachable; {config.zone} offers "
                                        f"{config.accelerator}")


def _connection_reason(error: Exception) -> str:
    """The innermost words of a connection failure ("[Errno 111] Connection refused"), not urllib3's
    whole chain with the request URL."""
    text = str(error)
    errno = re.search(r"\[Errno -?\d+\] [^'\")]+", text)
    return errno.group(0) if errno else ("timed out" if "timed out" in text.lower() else text[:200])


def check_network(config: PreflightConfig, credentials: Credentials) -> CheckResult:
    base = (config.compute_endpoint or COMPUTE_ENDPOINT).rstrip("/")
    network = config.network_name
    unset = "" if config.network else " (NETWORK is unset: the project's default network)"
    with AuthorizedSession(credentials) as session:
        status, message = _get(session, f"{base}/compute/v1/projects/{config.project}/global/networks/{network}")
        if status == 404:
            return CheckResult("network", False, f"network {network!r} does not exist in {config.project}{unset}",
                               "set NETWORK to an existing VPC network (`gcloud compute networks list`), or create "
                               f"it: `gcloud compute networks create {network} --subnet-mode=auto`")
        if status != 200:
            return _access_failure("network", status, message,
                                   f"grant the bot's account roles/compute.networkViewer, or check by hand: "
                                   f"`gcloud compute networks describe {network}`")
        if not config.subnetwork:
            return CheckResult("network", True, f"network {network} exists{unset}")
        region = region_of(config.zone)
        status, message = _get(session, f"{base}/compute/v1/projects/{config.project}/regions/{region}"
                                         f"/subnetworks/{config.subnetwork}")
        if status == 404:
            return CheckResult("network", False, f"subnetwork {config.subnetwork!r} does not exist in {region}",
                               f"set SUBNETWORK to a subnetwork of {network} in {region} "
                               f"(`gcloud compute networks subnets list --network {network}`), or leave it empty")
        if status != 200:
            return _access_failure("network", status, message, "grant the bot's account roles/compute.networkViewer")
        return CheckResult("network", True, f"network {network} and subnetwork {config.subnetwork} ({region}) exist")


def check_secret(config: PreflightConfig, credentials: Credentials) -> CheckResult:
    from google.cloud import secretmanager_v1

    options = {"api_endpoint": config.secretmanager_endpoint} if config.secretmanager_endpoint else None
    client = secretmanager_v1.SecretManagerServiceClient(transport="rest", credentials=credentials,
                                                          client_options=options)
    create = (f"create it: `printf %s \"$HF_TOKEN\" | gcloud secrets create {config.hf_token_secret} "
              "--data-file=-` (a Hugging Face token whose account accepted the Gemma license), or set "
              "HF_TOKEN_SECRET to the secret that holds it")
    try:
        response = client.access_secret_version(name=config.secret_version, timeout=CALL_TIMEOUT)
    except gexc.NotFound:
        return CheckResult("hf token secret", False, f"secret {config.secret_version} does not exist or has no "
                                                     "version", create)
    except gexc.Forbidden as error:  # over REST a 403 is Forbidden (PermissionDenied is only its gRPC subclass)
        return CheckResult("hf token secret", False, f"secret {config.secret_version} is not readable: "
                                                     f"{error.message}",
                           "grant roles/secretmanager.secretAccessor on the secret to the bot's account (to check "
                           "it) and to the TPU VM's service account (which reads it at boot)")
    except (gexc.GoogleAPICallError, requests.RequestException, auth_exc.GoogleAuthError) as error:
        return CheckResult("hf token secret", False, f"Secret Manager could not be asked: {error}",
                           "enable the Secret Manager API (`gcloud services enable secretmanager.googleapis.com`)")
    finally:
        client.transport.close()
    if not response.payload.data.strip():
        return CheckResult("hf token secret", False, f"secret {config.secret_version} is empty", create)
    # Readability is all that is reported: the value itself is dropped here.
    return CheckResult("hf token secret", True, f"secret {config.secret_version} exists and is readable")


def check_quota(config: PreflightConfig, credentials: Credentials) -> CheckResult:
    from google.cloud import cloudquotas_v1

    family = config.accelerator.rsplit("-", 1)[0]
    quota_id = PREEMPTIBLE_QUOTA_IDS.get(family)
    if quota_id is None:
        return CheckResult("tpu quota", False, f"no known preemptible quota id for {config.accelerator}",
                           "use TPU_ACCELERATOR_TYPE=v5litepod-1")
    name = f"projects/{config.project}/locations/global/services/{QUOTA_SERVICE}/quotaInfos/{quota_id}"
    options = {"api_endpoint": config.quotas_endpoint} if config.quotas_endpoint else None
    client = cloudquotas_v1.CloudQuotasClient(transport="rest", credentials=credentials, client_options=options)
    try:
        info = client.get_quota_info(name=name, timeout=CALL_TIMEOUT)
    except gexc.Forbidden as error:  # over REST a 403 is Forbidden (PermissionDenied is only its gRPC subclass)
        return CheckResult("tpu quota", False, f"the Cloud Quotas API refused to show {quota_id}: {error.message}",
                           f"grant the bot's account roles/cloudquotas.viewer on project {config.project} "
                           f"(`gcloud projects add-iam-policy-binding {config.project} --member=ACCOUNT "
                           "--role=roles/cloudquotas.viewer`)")
    except (gexc.GoogleAPICallError, requests.RequestException, auth_exc.GoogleAuthError) as error:
        return CheckResult("tpu quota", False, f"could not read quota {quota_id}: {error}",
                           "enable the Cloud Quotas API (`gcloud services enable cloudquotas.googleapis.com`)")
    finally:
        client.transport.close()
    limits = {dict(d.dimensions).get("zone", ""): int(d.details.value) for d in info.dimensions_infos}
    limit = limits.get(config.zone, limits.get("", 0))
    with_quota = sum(1 for zone, value in limits.items() if zone and value > 0)
    if limit <= 0:
        return CheckResult("tpu quota", False, f"{quota_id} is {limit} in {config.zone}",
                           f"request preemptible {family} quota in {config.zone} (flex-start draws on it): "
                           "IAM & Admin → Quotas, or set TPU_ZONE to a zone with quota")
    return CheckResult("tpu quota", True, f"{quota_id} is {limit} chips in {config.zone} ({with_quota} zones have "
                                          "some; quota is not capacity)")


def check_firewall(config: PreflightConfig, credentials: Credentials) -> CheckResult:
    """Does an enabled INGRESS rule on the network admit every MODEL_SOURCE_RANGES range to the tag's port?"""
    name = "model firewall"
    create = firewall_fix(config)
    if not config.model_source_ranges:
        return CheckResult(name, False, "MODEL_SOURCE_RANGES is unset, so no firewall rule can be checked (and the "
                                        f"model port {config.model_port} may be unreachable or open to everyone)",
                           "set MODEL_SOURCE_RANGES to the address the bot calls vLLM from (its egress IP/32, e.g. "
                           f"`curl -s https://checkip.amazonaws.com`), then: {create}")
    base = (config.compute_endpoint or COMPUTE_ENDPOINT).rstrip("/")
    url = f"{base}/compute/v1/projects/{config.project}/global/firewalls"
    rules = _compute_list(credentials, url, name, "the Compute API refused to list firewall rules",
                          "grant the bot's account roles/compute.networkViewer (it includes compute.firewalls.list), "
                          f"or check by hand: `gcloud compute firewall-rules list --filter=network:{config.network_name}`")
    if isinstance(rules, CheckResult):
        return rules
    admitting = [rule["name"] for rule in rules if _admits(rule, config)]
    ranges = ",".join(config.model_source_ranges)
    if not admitting:
        return CheckResult(name, False, f"no firewall rule on network {config.network_name} admits {ranges} to "
                                        f"tag {config.network_tag} on tcp:{config.model_port}", create)
    return CheckResult(name, True, f"rule {admitting[0]} admits {ranges} to tag {config.network_tag} on "
                                   f"tcp:{config.model_port}")


def firewall_fix(config: PreflightConfig) -> str:
    ranges = ",".join(config.model_source_ranges) or "BOT_EGRESS_IP/32"
    return ("`gcloud compute firewall-rules create tpubot-model "
            + " ".join(shlex.quote(arg) for arg in (
                f"--project={config.project}", f"--network={config.network_name}", "--direction=INGRESS",
                "--action=ALLOW", f"--rules=tcp:{config.model_port}", f"--source-ranges={ranges}",
                f"--target-tags={config.network_tag}"))
            + "`")


def _admits(rule: dict, config: PreflightConfig) -> bool:
    if rule.get("disabled") or rule.get("direction", "INGRESS") != "INGRESS" or "allowed" not in rule:
        return False
    if str(rule.get("network", "")).rsplit("/", 1)[-1] != config.network_name:
        return False
    tags, accounts = rule.get("targetTags") or [], rule.get("targetServiceAccounts") or []
    if accounts or (tags and config.network_tag not in tags):
        return False  # a rule with neither applies to every instance of the network
    if not any(_allows_port(item, config.model_port) for item in rule["allowed"]):
        return False
    sources = [ipaddress.ip_network(r, strict=False) for r in rule.get("sourceRanges") or []]
    return all(any(_subnet_of(wanted, source) for source in sources)
               for wanted in (ipaddress.ip_network(r, strict=False) for r in config.model_source_ranges))


def _subnet_of(inner: ipaddress.IPv4Network | ipaddress.IPv6Network,
               outer: ipaddress.IPv4Network | ipaddress.IPv6Network) -> bool:
    if isinstance(inner, ipaddress.IPv4Network) and isinstance(outer, ipaddress.IPv4Network):
        return inner.subnet_of(outer)
    if isinstance(inner, ipaddress.IPv6Network) and isinstance(outer, ipaddress.IPv6Network):
        return inner.subnet_of(outer)
    return False  # an IPv4 range never holds an IPv6 one, nor the reverse


def _allows_port(item: dict, port: int) -> bool:
    if str(item.get("IPProtocol", "")).lower() not in ("tcp", "6", "all"):
        return False
    ports = item.get("ports") or []
    for spec in ports:
        low, _, high = str(spec).partition("-")
        if int(low) <= port <= int(high or low):
            return True
    return not ports


def check_node_account(config: PreflightConfig, credentials: Credentials) -> CheckResult:
    """Which account the TPU VMs run as, and whether it can read the HF token secret at boot."""
    from infra.node_account import NodeAccount, NodeAccountError, grant_command

    name = "tpu vm account"
    account = NodeAccount(config.project, configured=config.tpu_service_account, credentials=credentials,
                          resourcemanager_endpoint=config.resourcemanager_endpoint,
                          secretmanager_endpoint=config.secretmanager_endpoint)
    try:
        email = account.email()
    except NodeAccountError as error:
        # Cannot tell is not "cannot read": the bot's permissions check names what the bot lacks.
        return CheckResult(name, True, f"could not tell which account the TPU VMs run as: {error.message}", error.fix,
                           warning=True)
    secret = config.secret_version.rsplit("/versions/", 1)[0]
    secret_id = secret.rsplit("/", 1)[-1]
    try:
        readable, how = account.can_read_secret(secret)
    except NodeAccountError as error:
        return CheckResult(name, True, f"the TPU VMs run as {email} ({account.described}); whether it can read "
                                       f"{secret_id} was not checked: {error.message}", error.fix, warning=True)
    grant = f"`{grant_command(secret_id, config.project, email)}`"
    if readable is None:
        return CheckResult(name, True, f"the TPU VMs run as {email} ({account.described}); {how}",
                           f"if it holds no such grant, {grant}", warning=True)
    if not readable:
        return CheckResult(name, False, f"the TPU VMs run as {email} ({account.described}), which may not read "
                                        f"{secret_id}: {how}; the VM would give up reading it at boot", grant)
    return CheckResult(name, True, f"the TPU VMs run as {email} ({account.described}) and may read {secret_id} "
                                   f"({how})")


def check_bot_permissions(config: PreflightConfig, credentials: Credentials) -> CheckResult:
    """What the bot's own account may do on the project, asked of Google (Resource Manager's
    testIamPermissions) rather than found by trying: its Secret Manager work for each lease's key, and
    the project's number that names the TPU VM's default account."""
    from infra.model_keys import BOT_SECRET_PERMISSIONS

    name = "bot permissions"
    wanted = (*BOT_SECRET_PERMISSIONS, "resourcemanager.projects.get")
    base = (config.resourcemanager_endpoint or "https://cloudresourcemanager.googleapis.com").rstrip("/")
    held = _held_permissions(name, credentials, f"{base}/v1/projects/{config.project}", wanted,
                             api="Cloud Resource Manager", service="cloudresourcemanager.googleapis.com")
    if isinstance(held, CheckResult):
        return held
    missing = [permission for permission in wanted if permission not in held]
    if not missing:
        return CheckResult(name, True, f"the bot's account holds the {len(BOT_SECRET_PERMISSIONS)} Secret Manager "
                                       "permissions of the lease's key and resourcemanager.projects.get")
    roles = []
    if any(p.startswith("secretmanager.") for p in missing):
        roles.append("roles/secretmanager.admin (the one predefined role that creates, deletes and sets the IAM "
                     "policy of secrets), or add them to the bot's custom role")
    if "resourcemanager.projects.get" in missing:
        roles.append("roles/tpu.admin (it holds resourcemanager.projects.get)")
    return CheckResult(name, False, f"the bot's account lacks {', '.join(missing)} on project {config.project}: "
                                    "`/tpu up` would fail before any TPU",
                       f"grant the bot's account {' and '.join(roles)} on the project")


def _held_permissions(name: str, credentials: Credentials, resource_url: str, wanted: Sequence[str], *, api: str,
                      service: str) -> set[str] | CheckResult:
    """Which of `wanted` the credentials hold on a resource (its API's testIamPermissions), or the
    warning that says it was not checked and why."""
    try:
        with AuthorizedSession(credentials) as session:
            response = session.post(f"{resource_url}:testIamPermissions", json={"permissions": list(wanted)},
                                    timeout=CALL_TIMEOUT)
    except (requests.RequestException, auth_exc.GoogleAuthError) as error:
        return CheckResult(name, True, f"not checked: {api} did not answer ({error})",
                           f"check the network path to {service}", warning=True)
    if response.status_code != 200:
        return CheckResult(name, True,
                           f"not checked: {api} answered HTTP {response.status_code} ({error_message(response)})",
                           f"enable the {api} API (`gcloud services enable {service}`)", warning=True)
    return set(response.json().get("permissions") or [])


def check_act_as(config: PreflightConfig, credentials: Credentials) -> CheckResult:
    """TPU_SERVICE_ACCOUNT: may the bot act as it? Asked of IAM (testIamPermissions on the account)."""
    name, email = "tpu vm actAs", config.tpu_service_account
    base = (config.iam_endpoint or IAM_ENDPOINT).rstrip("/")
    held = _held_permissions(name, credentials, f"{base}/v1/projects/-/serviceAccounts/{email}", [ACT_AS],
                             api="IAM", service="iam.googleapis.com")
    if isinstance(held, CheckResult):
        return held
    if ACT_AS in held:
        return CheckResult(name, True, f"the bot's account may act as {email} (TPU_SERVICE_ACCOUNT)")
    # An account that does not exist is answered with no permissions too (as the sandbox assumes:
    # infra/sandbox/gcp_project_api.py says what is and is not verified), and a create would be refused alike.
    bot = account_email(credentials)
    return CheckResult(name, False, f"the bot's account may not act as {email} (TPU_SERVICE_ACCOUNT: {ACT_AS}), or "
                                    "no such account exists: Google would refuse every `/tpu up`",
                       act_as_fix(email, bot) if "@" in bot else act_as_fix(email))


def check_private_google_access(config: PreflightConfig, credentials: Credentials) -> CheckResult:
    """ENDPOINT_ADDRESS=internal: a node without an external IP reaches Google's APIs only through PGA."""
    name, region = "private google access", region_of(config.zone)
    subnet = config.subnetwork or config.network_name  # an auto-mode network's subnetwork is named after it
    base = (config.compute_endpoint or COMPUTE_ENDPOINT).rstrip("/")
    fix = (f"`gcloud compute networks subnets update {shlex.quote(subnet)} --project={config.project} "
           f"--region={region} --enable-private-ip-google-access`")
    with AuthorizedSession(credentials) as session:
        try:
            response = session.get(f"{base}/compute/v1/projects/{config.project}/regions/{region}/subnetworks/{subnet}",
                                   timeout=CALL_TIMEOUT)
        except requests.RequestException as error:
            return _access_failure(name, 0, str(error), "check the network path to the Compute API")
    if response.status_code != 200:
        return _access_failure(name, response.status_code, error_message(response),
                               "grant the bot's account roles/compute.networkViewer, or set SUBNETWORK to the "
                               "TPU's subnetwork")
    if not response.json().get("privateIpGoogleAccess"):
        return CheckResult(name, False, f"subnetwork {subnet} in {region} has Private Google Access off: a node "
                                        "without an external IP cannot reach Secret Manager (its secrets), Cloud "
                                        "Storage or Artifact Registry", fix)
    return CheckResult(name, True, f"subnetwork {subnet} in {region} has Private Google Access")


def check_egress(config: PreflightConfig, credentials: Credentials) -> CheckResult:
    """ENDPOINT_ADDRESS=internal: can a node with no external IP pull the image and the weights?"""
    name, region, network = "internal egress", region_of(config.zone), config.network_name
    mirror = _ARTIFACT_REGISTRY.match(config.vllm_image)
    mirrored = bool(mirror and mirror["location"] == region)
    base = (config.compute_endpoint or COMPUTE_ENDPOINT).rstrip("/")
    url = f"{base}/compute/v1/projects/{config.project}/regions/{region}/routers"
    routers = _compute_list(credentials, url, name, f"the Compute API refused to list the routers of {region}",
                            "grant the bot's account roles/compute.networkViewer (it includes compute.routers.list), "
                            f"or check by hand: `gcloud compute routers list --regions={region} "
                            f"--filter=network:{network}`")
    if isinstance(routers, CheckResult):
        return routers
    serving = [(router["name"], nat.get("name", "")) for router in routers
               if str(router.get("network", "")).rsplit("/", 1)[-1] == network
               for nat in router.get("nats") or [] if _nat_covers(nat, config)]
    if serving and not mirrored and image_registry(config.vllm_image) == DOCKER_HUB:
        router, nat = serving[0]
        return CheckResult(name, True, f"Cloud NAT {nat} on router {router} serves network {network} in {region}, "
                                       f"but VLLM_IMAGE ({config.vllm_image}) is on Docker Hub: it allows 10 anonymous "
                                       "pulls an hour per address and every node behind the NAT shares one",
                           mirror_fix(config), warning=True)
    if serving:
        router, nat = serving[0]
        return CheckResult(name, True, f"Cloud NAT {nat} on router {router} serves network {network} in {region}")
    where = (f"VLLM_IMAGE is in Artifact Registry in {region}, but the weights come from Hugging Face"
             if mirrored else "neither the image nor the weights can be pulled")
    return CheckResult(name, False, f"ENDPOINT_ADDRESS=internal, but network {network} has no Cloud NAT in {region}: "
                                    f"{where}, and a node without an external IP reaches the internet only through one",
                       nat_fix(config))


def mirror_fix(config: PreflightConfig) -> str:
    region, project = region_of(config.zone), config.project
    name = config.vllm_image.rsplit("/", 1)[-1].split("@")[0]
    target = f"{region}-docker.pkg.dev/{project}/vllm/{name}"
    return (f"`gcloud artifacts repositories create vllm --repository-format=docker --location={region} "
            f"--project={project}`, then `docker pull {config.vllm_image} && docker tag {config.vllm_image} {target} && "
            f"docker push {target}` and set VLLM_IMAGE={target}")


def nat_fix(config: PreflightConfig) -> str:
    region, project = region_of(config.zone), config.project
    router = " ".join(shlex.quote(arg) for arg in (
        "tpubot-nat-router", f"--project={project}", f"--network={config.network_name}", f"--region={region}"))
    nat = " ".join(shlex.quote(arg) for arg in (
        "tpubot-nat", f"--project={project}", "--router=tpubot-nat-router", f"--region={region}",
        "--auto-allocate-nat-external-ips", "--nat-all-subnet-ip-ranges"))
    return f"`gcloud compute routers create {router} && gcloud compute routers nats create {nat}`"


def _nat_covers(nat: dict, config: PreflightConfig) -> bool:
    option = nat.get("sourceSubnetworkIpRangesToNat", "")
    if option != "LIST_OF_SUBNETWORKS":
        return bool(option)  # ALL_SUBNETWORKS_ALL_IP_RANGES / ALL_SUBNETWORKS_ALL_PRIMARY_IP_RANGES
    listed = {str(item.get("name", "")).rsplit("/", 1)[-1] for item in nat.get("subnetworks") or []}
    # Without SUBNETWORK the node lands in the network's subnetwork of the region, which an auto-mode
    # network names after itself.
    return (config.subnetwork or config.network_name) in listed


def check_cache_bucket(config: PreflightConfig, credentials: Credentials) -> CheckResult:
    """XLA_CACHE_BUCKET: does it exist, and does it keep its data in the TPU's region?"""
    from infra.gcs_location import Placement, placement

    name, region = "xla cache bucket", region_of(config.zone)
    bucket = config.xla_cache_bucket.strip().removeprefix("gs://").strip("/")
    create = (f"`gcloud storage buckets create gs://{bucket} --project={config.project} --location={region} "
              "--uniform-bucket-level-access`, or set XLA_CACHE_BUCKET to a bucket in " + region)
    base = (config.storage_endpoint or STORAGE_ENDPOINT).rstrip("/")
    with AuthorizedSession(credentials) as session:
        try:
            response = session.get(f"{base}/storage/v1/b/{bucket}", timeout=CALL_TIMEOUT)
        except requests.RequestException as error:
            return _access_failure(name, 0, str(error), "check the network path to the Cloud Storage API")
    if response.status_code == 404:
        return CheckResult(name, False, f"bucket {bucket} (XLA_CACHE_BUCKET) does not exist", create)
    if response.status_code == 403:
        return CheckResult(name, False, f"bucket {bucket} is not readable: {error_message(response)}",
                           f"grant the bot's account roles/storage.bucketViewer on gs://{bucket} (it includes "
                           "storage.buckets.get)")
    if response.status_code != 200:
        return _access_failure(name, response.status_code, error_message(response),
                               "enable the Cloud Storage API (`gcloud services enable storage.googleapis.com`)")
    body = response.json()
    location = str(body.get("location", "")) or "an unknown location"
    where = placement(body, region)
    if where is Placement.IN_REGION:
        return CheckResult(name, True, f"bucket {bucket} is in {location}, the TPU's region")
    if where is Placement.SPANS_REGION:
        return CheckResult(name, True, f"bucket {bucket} is in {location} ({body.get('locationType', 'multi-region')})"
                                       f", which contains the TPU's region {region} but is not it: cache restores "
                                       "may cross regions", create, warning=True)
    return CheckResult(name, False, f"bucket {bucket} is in {location}, but the TPU is in {region} (zone "
                                    f"{config.zone}): every cache restore would cross regions", create)


CHECKS: tuple[Callable[[PreflightConfig, Credentials], CheckResult], ...] = (
    check_project, check_network, check_firewall, check_secret, check_quota, check_node_account, check_bot_permissions,
)
# (name, does it apply to these settings, check): run after CHECKS, only where they apply.
CONDITIONAL_CHECKS: tuple[tuple[str, Callable[[PreflightConfig], bool],
                                Callable[[PreflightConfig, Credentials], CheckResult]], ...] = (
    ("internal egress", lambda config: config.endpoint_address == "internal", check_egress),
    ("private google access", lambda config: config.endpoint_address == "internal", check_private_google_access),
    ("xla cache bucket", lambda config: bool(config.xla_cache_bucket.strip()), check_cache_bucket),
    ("tpu vm actAs", lambda config: bool(config.tpu_service_account), check_act_as),
)


def _get(session, url: str) -> tuple[int, str]:
    try:
        response = session.get(url, timeout=CALL_TIMEOUT)
    except requests.RequestException as error:
        return 0, str(error)
    return response.status_code, error_message(response)


def _compute_list(credentials, url: str, name: str, refused: str, refused_fix: str) -> list[dict] | CheckResult:
    """Every item of a paged Compute list, or the check's failure that says why it could not be read."""
    items: list[dict] = []
    with AuthorizedSession(credentials) as session:
        token = ""
        while True:
            query: dict[str, str | int] = {"maxResults": 500, **({"pageToken": token} if token else {})}
            try:
                response = session.get(url, params=query, timeout=CALL_TIMEOUT)
            except requests.RequestException as error:
                return _access_failure(name, 0, str(error), "check the network path to the Compute API")
            if response.status_code == 403:
                return CheckResult(name, False, f"{refused}: {error_message(response)}", refused_fix)
            if response.status_code != 200:
                return _access_failure(name, response.status_code, error_message(response),
                                       "enable the Compute Engine API (`gcloud services enable compute.googleapis.com`)")
            page = response.json()
            items += page.get("items", [])
            token = page.get("nextPageToken", "")
            if not token:
                return items


def _access_failure(name: str, status: int, message: str, fix: str) -> CheckResult:
    what = f"HTTP {status}" if status else "no answer"
    return CheckResult(name, False, f"could not check ({what}: {message})", fix)


# --- the cached verdict ---------------------------------------------------------------------------

def _key(fingerprint: str) -> str:
    return f"{keys.PREFIX}:preflight:{fingerprint}"


class PreflightStore:
    def __init__(self, redis: Redis) -> None:
        self._redis = redis

    async def save(self, report: PreflightReport, ttl: timedelta) -> None:
        await self._redis.set(_key(report.fingerprint), report.to_json(), ex=max(1, int(ttl.total_seconds())))

    async def load(self, fingerprint: str) -> PreflightReport | None:
        raw = await self._redis.get(_key(fingerprint))
        return PreflightReport.from_json(raw) if raw else None


@dataclass(frozen=True)
class PreflightGate:
    """What `/tpu up` asks: did the last doctor run for these very settings fail?"""

    store: PreflightStore
    fingerprint: str

    async def failures(self) -> list[CheckResult]:
        """The failed checks of the cached verdict; empty when it passed or was never run."""
        report = await self.store.load(self.fingerprint)
        return report.failures if report is not None else []
