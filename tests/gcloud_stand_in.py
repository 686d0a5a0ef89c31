#!/usr/bin/env python3
"""`gcloud`, for the README's IAM commands only, against the sandbox's emulated APIs (a test helper).

It does what the real gcloud does for these commands, over the same REST calls, where the
`CLOUDSDK_API_ENDPOINT_OVERRIDES_*` variables point (gcloud's own properties as variables), with
the token in `CLOUDSDK_AUTH_ACCESS_TOKEN`:

    gcloud projects describe P --format='value(projectNumber)'      Resource Manager projects.get
    gcloud projects add-iam-policy-binding P --member M --role R   projects:getIamPolicy + :setIamPolicy
    gcloud secrets add-iam-policy-binding S --project P --member M --role R
    gcloud secrets create S --data-file=- --project P              secrets.create + :addVersion
    gcloud storage buckets add-iam-policy-binding gs://B --member M --role R
    gcloud iam service-accounts create NAME --project P             IAM serviceAccounts.create
    gcloud iam service-accounts add-iam-policy-binding EMAIL --project P --member M --role R
                                                                   :getIamPolicy + :setIamPolicy
    gcloud services enable …                                       (nothing to do in the sandbox)

Anything else exits 2 naming the command, so a README command this does not know fails the test.
"""

from __future__ import annotations

import base64
import os
import sys

import requests


def _endpoint(api: str) -> str:
    value = os.environ.get(f"CLOUDSDK_API_ENDPOINT_OVERRIDES_{api.upper()}", "")
    if not value:
        sys.exit(f"gcloud stand-in: CLOUDSDK_API_ENDPOINT_OVERRIDES_{api.upper()} is not set")
    return value.rstrip("/")


def _headers() -> dict[str, str]:
    token = os.environ.get("CLOUDSDK_AUTH_ACCESS_TOKEN", "")
    return {"Authorization": f"Bearer {token}"} if token else {}


def _options(args: list[str]) -> tuple[list[str], dict[str, str]]:
    positional, options = [], {}
    rest = list(args)
    while rest:
        item = rest.pop(0)
        if item.startswith("--"):
            name, eq, value = item[2:].partition("=")
            options[name] = value if eq else (rest.pop(0) if rest and not rest[0].startswith("--") else "")
        else:
            positional.append(item)
    return positional, options


def _ok(response: requests.Response, command: str = "", project: str = "") -> dict:
    if response.status_code != 200:
        error = response.json().get("error", {})
        message = error.get("message", response.text)
        if error.get("status") == "ALREADY_EXISTS" and command:  # gcloud's words for a 409 on a create
            message = f"Resource in projects [{project}] is the subject of a conflict: {message}"
        sys.stderr.write(f"ERROR: (gcloud{'.' + command if command else ''}) {message}\n")
        sys.exit(1)
    return response.json() if response.content else {}


def _add_binding(policy: dict, member: str, role: str) -> dict:
    bindings = policy.setdefault("bindings", [])
    for binding in bindings:
        if binding["role"] == role:
            if member not in binding["members"]:
                binding["members"].append(member)
            return policy
    bindings.append({"role": role, "members": [member]})
    return policy


def _bind(base: str, read: str, options: dict[str, str]) -> None:
    """`add-iam-policy-binding` as gcloud does it: read the resource's policy (GET or POST :getIamPolicy, as
    its API has it), add the member to the role, write it back with its etag."""
    policy = _ok(requests.request(read.upper(), f"{base}:getIamPolicy", json={} if read == "post" else None,
                                  headers=_headers(), timeout=10))
    _ok(requests.post(f"{base}:setIamPolicy", json={"policy": _add_binding(policy, options["member"], options["role"])},
                      headers=_headers(), timeout=10))


def main(argv: list[str]) -> int:
    positional, options = _options(argv)
    command = " ".join(positional[:2])
    if positional[:2] == ["services", "enable"]:
        return 0
    if command == "projects describe":
        body = _ok(requests.get(f"{_endpoint('cloudresourcemanager')}/v1/projects/{positional[2]}",
                                headers=_headers(), timeout=10))
        if options.get("format") == "value(projectNumber)":
            print(body["projectNumber"])
            return 0
        print(body)
        return 0
    if command == "projects add-iam-policy-binding":
        base = f"{_endpoint('cloudresourcemanager')}/v1/projects/{positional[2]}"
        _bind(base, "post", options)
        print(f"Updated IAM policy for project [{positional[2]}].")
        return 0
    if command == "secrets add-iam-policy-binding":
        base = f"{_endpoint('secretmanager')}/v1/projects/{options['project']}/secrets/{positional[2]}"
        _bind(base, "get", options)
        print(f"Updated IAM policy for secret [{positional[2]}].")
        return 0
    if command == "secrets create":
        base = f"{_endpoint('secretmanager')}/v1/projects/{options['project']}/secrets"
        _ok(requests.post(f"{base}?secretId={positional[2]}", json={"replication": {"automatic": {}}},
                          headers=_headers(), timeout=10))
        data = sys.stdin.buffer.read() if options.get("data-file") == "-" else open(options["data-file"], "rb").read()
        _ok(requests.post(f"{base}/{positional[2]}:addVersion",
                          json={"payload": {"data": base64.b64encode(data).decode()}}, headers=_headers(), timeout=10))
        return 0
    if positional[:3] == ["storage", "buckets", "add-iam-policy-binding"]:
        bucket = positional[3].removeprefix("gs://")
        url = f"{_endpoint('storage')}/storage/v1/b/{bucket}/iam"
        policy = _ok(requests.get(url, headers=_headers(), timeout=10))
        policy.pop("kind", None), policy.pop("resourceId", None)
        _ok(requests.put(url, json=_add_binding(policy, options["member"], options["role"]), headers=_headers(),
                         timeout=10))
        return 0
    if positional[:3] == ["iam", "service-accounts", "create"]:
        account = _ok(requests.post(f"{_endpoint('iam')}/v1/projects/{options['project']}/serviceAccounts",
                                    json={"accountId": positional[3], "serviceAccount": {}}, headers=_headers(),
                                    timeout=10), "iam.service-accounts.create", options["project"])
        sys.stderr.write(f"Created service account [{positional[3]}].\n")
        return 0 if account.get("email") else 1
    if positional[:3] == ["iam", "service-accounts", "add-iam-policy-binding"]:
        base = f"{_endpoint('iam')}/v1/projects/{options.get('project') or '-'}/serviceAccounts/{positional[3]}"
        _bind(base, "post", options)
        print(f"Updated IAM policy for serviceAccount [{positional[3]}].")
        return 0
    sys.stderr.write(f"gcloud stand-in: not a command the README uses: gcloud {' '.join(argv)}\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
