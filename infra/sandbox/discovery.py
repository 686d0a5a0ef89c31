"""Google's own API descriptions, used by the emulators to reject what the real APIs reject.

Every emulated request is matched to a method of the service's discovery document (the JSON that
ships in google-api-python-client under `googleapiclient/discovery_cache/documents/`) and checked
the way Google's front end checks it: an unknown body field, an unknown query parameter, a wrong
JSON type, an enum value the API does not define or a malformed duration/timestamp gets HTTP 400
`INVALID_ARGUMENT` with Google's wording, naming the field:

    Invalid JSON payload received. Unknown name "bogus" at 'queued_resource.tpu': Cannot find field.
    Invalid JSON payload received. Unknown name "bogus": Cannot bind query parameter. Field 'bogus'
      could not be found in request message.
    Invalid value at 'queued_resource.provisioning_model' (type.googleapis.com/…ProvisioningModel), "FLEX"

Responses an emulator produces are checked against the same schema (`check_response`): a field
the real API never returns is an emulator bug and fails loudly instead of teaching the bot to
rely on it.

Cloud Quotas has no discovery document in that wheel; `proto_api` builds the same description
from the google-cloud-quotas protobuf descriptors instead.

google-api-python-client is a dev dependency (it is ~110 MB installed; the bot never needs it at
run time). `load_api` returns None when it is absent; the emulators then run lenient, and
`strict_available()` lets `tpubot shell`/`sandbox` say so.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from importlib import resources
from typing import Any

from infra.sandbox.google_errors import error_body

log = logging.getLogger(__name__)
# Set to a file path to collect, across processes and test runs, every request the strict check refused.
STRICT_LOG_VAR = "TPUBOT_SANDBOX_STRICT_LOG"
DOCUMENTS_PACKAGE = "googleapiclient.discovery_cache.documents"
# Google's front end accepts these system parameters on every method (`$alt=json;enum-encoding=int`
# is what the generated REST clients send).
_SYSTEM_PARAMS = frozenset({"$alt", "$fields", "$prettyPrint", "$callback", "$.xgafv", "$outputDefaults"})
_DURATION = re.compile(r"^-?\d+(\.\d{1,9})?s$")


class RequestRejected(Exception):
    """What Google answers with HTTP 400 INVALID_ARGUMENT; `field` is the offending field path."""

    def __init__(self, message: str, field_path: str) -> None:
        super().__init__(message)
        self.message = message
        self.field = field_path

    def google_error(self) -> dict:
        return {"error": {"code": 400, "message": self.message, "status": "INVALID_ARGUMENT", "details": [
            {"@type": "type.googleapis.com/google.rpc.BadRequest",
             "fieldViolations": [{"field": self.field, "description": self.message}]}]}}


@dataclass(frozen=True)
class Method:
    id: str
    http_method: str
    path_template: str  # `{variable}` for each part of the path a request fills in
    parameters: Mapping[str, dict]
    request_ref: str | None
    response_ref: str | None

    def matches(self, path: str) -> bool:
        """Whether `path` (no leading /) is this method's. A variable never holds a `/`, so a path of
        another depth is not, and most of a large API's patterns are never compiled."""
        return path.count("/") == self.path_template.count("/") and bool(_path_pattern(self.path_template).match(path))

    @property
    def body_field(self) -> str:
        """The request message's field the HTTP body binds to (`*` for a whole `…Request`)."""
        if not self.request_ref or self.request_ref.endswith("Request"):
            return ""
        return _snake(self.request_ref)


@dataclass
class DiscoveryApi:
    name: str
    schemas: Mapping[str, dict]
    methods: list[Method]
    common_parameters: frozenset[str]
    proto_package: str
    checked: list[str] = field(default_factory=list)  # method ids seen, for coverage reports

    # --- matching -------------------------------------------------------------------------
    def method_for(self, http_method: str, path: str) -> Method | None:
        path = path.lstrip("/")
        for method in self.methods:
            if method.http_method == http_method and method.matches(path):
                return method
        return None

    # --- requests -------------------------------------------------------------------------
    def check_request(self, http_method: str, path: str, query: Mapping[str, list[str]], body: Any) -> Method | None:
        """Raise `RequestRejected` as Google would; None when no method of this API has that path."""
        method = self.method_for(http_method, path)
        if method is None:
            return None
        self.checked.append(method.id)
        try:
            self._check_query(method, query)
            if method.request_ref is not None:
                prefix = method.body_field
                if body is not None and not isinstance(body, dict):
                    raise RequestRejected(f"Invalid JSON payload received. Expected an object at '{prefix}'.", prefix)
                self._check_object(body or {}, self.schemas[method.request_ref], prefix, method.request_ref,
                                   request=True)
        except RequestRejected as rejected:
            _note("request", f"{http_method} {path}", method.id, rejected.message)
            raise
        return method

    def _check_query(self, method: Method, query: Mapping[str, list[str]]) -> None:
        for name, values in query.items():
            if name in _SYSTEM_PARAMS or name in self.common_parameters:
                continue
            spec = method.parameters.get(name) or method.parameters.get(_camel(name))
            if spec is None or spec.get("location") != "query":
                raise RequestRejected(f'Invalid JSON payload received. Unknown name "{name}": Cannot bind query '
                                      f"parameter. Field '{name}' could not be found in request message.", name)
            if len(values) > 1 and not spec.get("repeated"):
                raise RequestRejected(f"Invalid JSON payload received. Unknown name \"{name}\": Cannot bind query "
                                      "parameter. Multiple values for a non-repeated field.", name)
            for value in values:
                self._check_query_value(_snake(name), spec, value)

    def _check_query_value(self, path: str, spec: dict, value: str) -> None:
        kind = spec.get("type")
        if kind == "integer" and not re.fullmatch(r"-?\d+", value):
            raise _invalid_value(path, "TYPE_INT32" if spec.get("format") != "int64" else "TYPE_INT64", value)
        if kind == "boolean" and value.lower() not in ("true", "false", "1", "0"):
            raise _invalid_value(path, "TYPE_BOOL", value)
        if "enum" in spec and value not in spec["enum"]:
            raise _invalid_value(path, f"type.googleapis.com/{self.proto_package}.{_pascal(path)}", value)

    # --- responses ------------------------------------------------------------------------
    def check_response(self, method: Method, body: Any) -> list[str]:
        """Problems with a response an emulator is about to send (empty: it conforms)."""
        if method.response_ref is None or not isinstance(body, dict):
            return []
        try:
            self._check_object(body, self.schemas[method.response_ref], "", method.response_ref, request=False)
        except RequestRejected as problem:
            _note("response", "", method.id, problem.message)
            return [f"{method.id} response: {problem.message}"]
        return []

    # --- values ---------------------------------------------------------------------------
    def _check_object(self, value: dict, schema: dict, path: str, schema_name: str, *, request: bool) -> None:
        properties = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            spec = properties.get(key) or properties.get(_camel(key))
            if spec is None and extra is not None:
                spec = extra
                item_path = f"{path}[{key}]" if path else key
            elif spec is None:
                if key == "@type" and schema_name in ("", None):
                    continue
                where = f" at '{path}'" if path else ""
                raise RequestRejected(f'Invalid JSON payload received. Unknown name "{key}"{where}: Cannot find '
                                      "field.", path or key)
            else:
                name = _snake(key)
                item_path = f"{path}.{name}" if path else name
            self._check_value(item, spec, item_path, schema_name, key, request=request)

    def _check_value(self, value: Any, spec: dict, path: str, owner: str, key: str, *, request: bool) -> None:
        if value is None:
            return  # JSON null: the field is unset
        if "$ref" in spec:
            ref = spec["$ref"]
            target = self.schemas[ref]
            if target.get("type") == "object" or "properties" in target:
                if not isinstance(value, dict):
                    raise _invalid_value(path, f"type.googleapis.com/{self.proto_package}.{ref}", value)
                self._check_object(value, target, path, ref, request=request)
                return
            self._check_value(value, target, path, owner, key, request=request)
            return
        kind = spec.get("type")
        if kind == "array":
            if not isinstance(value, list):
                raise RequestRejected(f'Invalid JSON payload received. Unknown name "{key}" at \'{path}\': Proto '
                                      "field is repeated, expected a list.", path)
            for index, item in enumerate(value):
                self._check_value(item, spec.get("items") or {}, f"{path}[{index}]", owner, key, request=request)
            return
        if isinstance(value, list):
            raise RequestRejected(f'Invalid JSON payload received. Unknown name "{key}" at \'{path}\': Proto field is '
                                  "not repeating, cannot start list.", path)
        if kind == "object":
            if not isinstance(value, dict):
                raise _invalid_value(path, "TYPE_MESSAGE", value)
            self._check_object(value, spec, path, "", request=request)
            return
        if kind == "any":
            return
        if "enum" in spec:
            if isinstance(value, bool) or not isinstance(value, (str, int)):
                raise _invalid_value(path, self._enum_type(owner, key), value)
            if isinstance(value, str) and value not in spec["enum"]:
                raise _invalid_value(path, self._enum_type(owner, key), value)
            return  # integers: proto3 enums are open, any number parses
        self._check_scalar(value, kind, spec.get("format"), path)

    def _check_scalar(self, value: Any, kind: str | None, fmt: str | None, path: str) -> None:
        if kind == "boolean":
            if not isinstance(value, bool):
                raise _invalid_value(path, "TYPE_BOOL", value)
        elif kind == "integer" or fmt in ("int64", "uint64"):
            ok = (isinstance(value, int) and not isinstance(value, bool)) or (
                isinstance(value, str) and re.fullmatch(r"-?\d+", value) is not None)
            if not ok:
                raise _invalid_value(path, f"TYPE_{(fmt or 'int32').upper()}", value)
        elif kind == "number":
            if isinstance(value, bool) or not (isinstance(value, (int, float)) or value in ("NaN", "Infinity",
                                                                                             "-Infinity")):
                raise _invalid_value(path, f"TYPE_{(fmt or 'double').upper()}", value)
        elif kind == "string":
            if not isinstance(value, str):
                raise _invalid_value(path, _string_type(fmt), value)
            if fmt == "google-duration" and not _DURATION.match(value):
                raise _invalid_value(path, "type.googleapis.com/google.protobuf.Duration", value)
            if fmt == "google-datetime" and not _is_timestamp(value):
                raise _invalid_value(path, "type.googleapis.com/google.protobuf.Timestamp", value)
            if fmt == "byte" and not _is_base64(value):
                raise _invalid_value(path, "TYPE_BYTES", value)

    def _enum_type(self, owner: str, key: str) -> str:
        return f"type.googleapis.com/{self.proto_package}.{owner}.{key[:1].upper()}{key[1:]}"


def held_to_schema(api: DiscoveryApi | None, request: tuple[str, str, Mapping[str, list[str]], Any],
                   answer: Callable[[], tuple[int, Any]], rejected: list[RequestRejected], problems: list[str],
                   emulator: str, refusal: Callable[[RequestRejected], dict] = RequestRejected.google_error,
                   ) -> tuple[int, Any]:
    """One emulated call (method, path, query, body) held to its API's schema: a request the schema
    refuses is recorded in `rejected` and answered as Google does (`refusal`); else `answer()`, and
    a 200 answer that breaks the response schema is recorded in `problems` and answered 500."""
    checked = None
    if api is not None:
        try:
            checked = api.check_request(*request)
        except RequestRejected as refused:
            rejected.append(refused)
            return 400, refusal(refused)
    status, payload = answer()
    found = api.check_response(checked, payload) if api and checked and status == 200 else []
    if found:
        problems.extend(found)
        return 500, error_body(500, f"{emulator} sandbox bug: " + "; ".join(found))
    return status, payload


# --- loading ---------------------------------------------------------------------------------

def strict_available() -> bool:
    """True when google-api-python-client (the discovery documents) is installed."""
    try:
        resources.files(DOCUMENTS_PACKAGE)
    except ModuleNotFoundError:
        return False
    return True


@lru_cache(maxsize=None)
def _document(name: str) -> dict | None:
    try:
        text = resources.files(DOCUMENTS_PACKAGE).joinpath(f"{name}.json").read_text(encoding="utf-8")
    except (ModuleNotFoundError, FileNotFoundError):
        return None
    return json.loads(text)


def load_api(name: str, proto_package: str) -> DiscoveryApi | None:
    """The API described by discovery document `name` (e.g. `tpu.v2alpha1`); None without the wheel.

    Each call returns a fresh object (its `checked` list belongs to one emulator); the parsed JSON
    and the methods are shared.
    """
    document = _document(name)
    if document is None:
        return None
    return DiscoveryApi(name, document["schemas"], list(_methods(name)), frozenset(document.get("parameters", {})),
                        proto_package)


@lru_cache(maxsize=None)
def _methods(name: str) -> tuple[Method, ...]:
    """Once per document (compute.v1 alone has 1,025 methods): each emulator start rebuilt them."""
    document = _document(name)
    assert document is not None, name
    service_path = document.get("servicePath", "")
    return tuple(
        Method(id=m["id"], http_method=m["httpMethod"], path_template=(service_path + m.get("flatPath", m["path"])).lstrip("/"),
               parameters=m.get("parameters", {}), request_ref=(m.get("request") or {}).get("$ref"),
               response_ref=(m.get("response") or {}).get("$ref"))
        for m in _all_methods(document)
    )


def proto_api(name: str, proto_package: str, routes: list[tuple[str, str, str, Any, Any, Mapping[str, dict]]]
              ) -> DiscoveryApi | None:
    """An API described by protobuf messages instead of a discovery document (Cloud Quotas).

    `routes`: (method id, HTTP method, flat path template, request message or None, response
    message, query parameters). Returns None without the discovery wheel, like `load_api`, so
    that every emulator is strict or lenient together.
    """
    if not strict_available():
        return None
    schemas: dict[str, dict] = {}
    methods = []
    for method_id, http_method, path, request, response, params in routes:
        request_ref = _add_message_schema(schemas, request.DESCRIPTOR) if request is not None else None
        response_ref = _add_message_schema(schemas, response.DESCRIPTOR)
        methods.append(Method(method_id, http_method, path.lstrip("/"), dict(params), request_ref, response_ref))
    # The standard query parameters are the same for every Google API; borrow them from one document.
    standard = _document("tpu.v2")
    assert standard is not None, "strict_available() found the discovery documents"
    return DiscoveryApi(name, schemas, methods, frozenset(standard["parameters"]), proto_package)


def _add_message_schema(schemas: dict[str, dict], descriptor: Any) -> str:
    from google.protobuf.descriptor import FieldDescriptor as F

    ref = descriptor.name
    if ref in schemas:
        return ref
    properties: dict[str, dict] = {}
    schemas[ref] = {"id": ref, "type": "object", "properties": properties}
    scalar = {F.TYPE_BOOL: {"type": "boolean"}, F.TYPE_STRING: {"type": "string"},
              F.TYPE_BYTES: {"type": "string", "format": "byte"},
              F.TYPE_INT64: {"type": "string", "format": "int64"}, F.TYPE_UINT64: {"type": "string", "format": "uint64"},
              F.TYPE_INT32: {"type": "integer", "format": "int32"}, F.TYPE_UINT32: {"type": "integer", "format": "uint32"},
              F.TYPE_DOUBLE: {"type": "number", "format": "double"}, F.TYPE_FLOAT: {"type": "number", "format": "float"}}
    for fd in descriptor.fields:
        if fd.type == F.TYPE_MESSAGE and fd.message_type.GetOptions().map_entry:
            value_fd = fd.message_type.fields_by_name["value"]
            properties[fd.json_name] = {"type": "object", "additionalProperties": _field_spec(schemas, value_fd, scalar)}
            continue
        spec = _field_spec(schemas, fd, scalar)
        repeated = getattr(fd, "is_repeated", None)
        if repeated if repeated is not None else fd.label == F.LABEL_REPEATED:
            spec = {"type": "array", "items": spec}
        properties[fd.json_name] = spec
    return ref


def _field_spec(schemas: dict[str, dict], fd: Any, scalar: dict) -> dict:
    from google.protobuf.descriptor import FieldDescriptor as F

    if fd.type == F.TYPE_MESSAGE:
        full = fd.message_type.full_name
        if full == "google.protobuf.Duration":
            return {"type": "string", "format": "google-duration"}
        if full == "google.protobuf.Timestamp":
            return {"type": "string", "format": "google-datetime"}
        return {"$ref": _add_message_schema(schemas, fd.message_type)}
    if fd.type == F.TYPE_ENUM:
        return {"type": "string", "enum": [v.name for v in fd.enum_type.values]}
    return dict(scalar.get(fd.type, {"type": "any"}))


def _all_methods(resource: dict):
    yield from resource.get("methods", {}).values()
    for child in resource.get("resources", {}).values():
        yield from _all_methods(child)


@lru_cache(maxsize=None)
def _path_pattern(template: str) -> re.Pattern:
    """Compiled at a method's first request of its depth, once a process: `re`'s own cache holds
    512, fewer than one API's methods, and compiling all of compute.v1's was a quarter-second of
    every sandbox's start."""
    parts = re.split(r"(\{[^}]+\})", template)
    regex = "".join("[^/:]+" if part.startswith("{") else re.escape(part) for part in parts)
    return re.compile(f"^{regex}$")


def _note(kind: str, request: str, method_id: str, message: str) -> None:
    log.warning("sandbox schema check refused a %s: %s %s: %s", kind, method_id, request, message)
    path = os.environ.get(STRICT_LOG_VAR)
    if path:
        with open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps({"kind": kind, "method": method_id, "request": request, "message": message}) + "\n")


# --- helpers -----------------------------------------------------------------------------------

def _invalid_value(path: str, type_name: str, value: Any) -> RequestRejected:
    return RequestRejected(f"Invalid value at '{path}' ({type_name}), {json.dumps(value)}", path)


def _string_type(fmt: str | None) -> str:
    return {"google-duration": "type.googleapis.com/google.protobuf.Duration",
            "google-datetime": "type.googleapis.com/google.protobuf.Timestamp",
            "byte": "TYPE_BYTES"}.get(fmt or "", "TYPE_STRING")


def _is_timestamp(text: str) -> bool:
    value = re.sub(r"(\.\d{6})\d+", r"\1", text.replace("Z", "+00:00"))
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return False
    return parsed.tzinfo is not None


def _is_base64(text: str) -> bool:
    for decode in (base64.b64decode, base64.urlsafe_b64decode):
        try:
            decode(text.encode() + b"=" * (-len(text) % 4))
            return True
        except (binascii.Error, ValueError):
            continue
    return False


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _pascal(path: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in _camel(path.rsplit(".", 1)[-1]).split("_"))
