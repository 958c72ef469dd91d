"""The OSB logic of the provider's ``ServiceInstance`` and ``ServiceBinding`` resources: check, diff, create,
read, update and delete against *any* OSB broker, on plain property dicts (snake_case keys).

The providers are thin: validate inputs (``check``), decide replace-or-update (``diff``), then call
``opbroker.osbclient`` and poll ``last_operation`` until the broker is done. A failed or abandoned create
is followed by a best-effort DELETE (orphan mitigation, as platforms do), so nothing half-created leaks
when Pulumi records no resource. ``api_version`` (default 2.17) is the OSB version spoken first; the client steps
down on 412 as the Service Catalog controller does (``osbclient.versions``) and the version the broker accepted is
the output ``broker_api_version``, spoken first again by the resource's later operations.

The gRPC edge (``opbroker.provider.custom``) translates the wire's camelCase names and marks secrets; nothing here
knows about gRPC or the engine, so the tests call these classes directly.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pulumi.runtime import rpc

from opbroker import osbclient as osb

#: Inputs whose change cannot be applied in place: a different instance at the broker.
INSTANCE_REPLACE_KEYS = ("broker_url", "instance_id", "service_id", "organization_guid", "space_guid")
#: Inputs an OSB update (PATCH) changes in place.
INSTANCE_UPDATE_KEYS = ("plan_id", "parameters", "context")
#: Inputs that only change how we talk to the broker.
CONNECTION_KEYS = ("broker_username", "broker_password", "api_version", "timeout", "poll_interval", "orphan_mitigation")
#: Bindings are immutable in OSB: any change of these is a new binding.
BINDING_REPLACE_KEYS = (
    "broker_url",
    "binding_id",
    "instance_id",
    "service_id",
    "plan_id",
    "parameters",
    "bind_resource",
    "context",
)
#: Left by the dynamic-provider version of these resources (a pickled provider); never an input.
_PROVIDER_KEY = "__provider"
DEFAULT_TIMEOUT = 1800.0
DEFAULT_POLL_INTERVAL = 2.0
#: Backoff doubles from poll_interval up to this (or poll_interval, when larger).
MAX_POLL_INTERVAL = 30.0


@dataclass(frozen=True)
class CheckFailure:
    """An input at fault and why."""

    property: str
    reason: str


@dataclass(frozen=True)
class CheckResult:
    """The checked inputs (ids generated, defaults filled) and what is wrong with them."""

    inputs: dict[str, Any]
    failures: list[CheckFailure] = field(default_factory=list)


@dataclass(frozen=True)
class DiffResult:
    """Whether anything changed, which keys force a new resource, and whether the old one goes first."""

    changes: bool
    replaces: list[str]
    delete_before_replace: bool
    changed: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class CreateResult:
    id: str
    outs: dict[str, Any]


@dataclass(frozen=True)
class UpdateResult:
    outs: dict[str, Any]


@dataclass(frozen=True)
class ReadResult:
    """What the broker holds; an empty ``id`` means the broker no longer has it. ``note``: why the state was kept
    as it was when the broker could not tell (a warning for the user)."""

    id: str
    outs: dict[str, Any]
    note: str | None = None


def _plain(value: Any) -> Any:
    """Values without RPC secret wrappers (the engine normally strips them; be safe either way)."""
    if rpc.is_rpc_secret(value):
        return _plain(rpc.unwrap_rpc_secret(value))
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _props(props: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _plain(v) for k, v in props.items() if k != _PROVIDER_KEY}


def _known(value: Any) -> bool:
    return value is not None and value != rpc.UNKNOWN


def needs_mitigation(exc: Exception) -> bool:
    """Whether a failed create may have left something at the broker: a failed or abandoned async
    operation, a malformed success, a server error or a failed connection. A 4xx changed nothing.

    Deliberately broader than the OSB table (``osbclient.needs_orphan_mitigation_after``): a best-effort
    DELETE also follows a malformed 200 and a broker that could not be reached, since Pulumi records nothing
    for a failed create and the DELETE is harmless when there is nothing to delete."""
    if isinstance(exc, osb.OperationFailed | osb.OperationTimeout | osb.MalformedResponse | osb.TransportFailure):
        return True
    return isinstance(exc, osb.OSBError) and exc.status >= 500


def _check_common(news: Mapping[str, Any], required: tuple[str, ...]) -> list[CheckFailure]:
    failures = []
    url = news.get("broker_url")
    if _known(url) and not (isinstance(url, str) and url.startswith(("http://", "https://"))):
        failures.append(CheckFailure("broker_url", f"must be an http(s) URL, got {url!r}"))
    for key in required:
        value = news.get(key)
        if value is None or (value != rpc.UNKNOWN and (not isinstance(value, str) or not value.strip())):
            failures.append(CheckFailure(key, "is required (a non-empty string)"))
    for key in ("timeout", "poll_interval"):
        value = news.get(key)
        if _known(value) and (not isinstance(value, int | float) or value <= 0):
            failures.append(CheckFailure(key, f"must be a positive number of seconds, got {value!r}"))
    version = news.get("api_version")
    if _known(version) and version not in osb.versions.SUPPORTED:
        supported = ", ".join(osb.versions.SUPPORTED)
        failures.append(CheckFailure("api_version", f"must be one of {supported}, got {version!r}"))
    for key in ("parameters", "context", "bind_resource"):
        value = news.get(key)
        if _known(value) and not isinstance(value, dict):
            failures.append(CheckFailure(key, "must be an object"))
    return failures


#: Connection inputs filled in when left out (None or absent), for every language alike.
CONNECTION_DEFAULTS: Mapping[str, Any] = {
    "api_version": osb.API_VERSION,
    "timeout": DEFAULT_TIMEOUT,
    "poll_interval": DEFAULT_POLL_INTERVAL,
    "orphan_mitigation": True,
}


@dataclass(frozen=True)
class Platform:
    """Who asks: the Pulumi project and stack (from the resource's URN). They default the OSB ``context``
    (``{"platform": "pulumi", "project", "stack"}``), ``organization_guid`` (the project) and ``space_guid``
    (``<project>-<stack>``), which OSB requires and Pulumi has no better value for."""

    project: str = "project"
    stack: str = "stack"

    def context(self) -> dict[str, Any]:
        return {"platform": "pulumi", "project": self.project, "stack": self.stack}


def _with_defaults(news: Mapping[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any]:
    inputs = {k: v for k, v in news.items() if k != _PROVIDER_KEY}
    for key, value in defaults.items():
        if inputs.get(key) is None:
            inputs[key] = value
    return inputs


def _changed(olds: Mapping[str, Any], news: Mapping[str, Any], keys: tuple[str, ...]) -> list[str]:
    return [k for k in keys if olds.get(k) != news.get(k)]


class _OSBProvider:
    """What both providers share: the broker connection and the polling settings (injectable clock)."""

    def __init__(
        self, *, clock: Callable[[], float] | None = None, sleep: Callable[[float], None] | None = None
    ) -> None:
        self._clock = clock
        self._sleep = sleep

    def client(self, props: Mapping[str, Any]) -> osb.Client:
        return osb.Client(
            osb.Broker(
                url=str(props["broker_url"]),
                auth=osb.BasicAuth(str(props["broker_username"]), str(props["broker_password"])),
                api_version=str(props.get("broker_api_version") or props.get("api_version") or osb.API_VERSION),
            )
        )

    def backoff(self, props: Mapping[str, Any]) -> osb.Backoff:
        interval = float(props.get("poll_interval") or DEFAULT_POLL_INTERVAL)
        return osb.Backoff(
            base=interval,
            maximum=max(interval, MAX_POLL_INTERVAL),
            max_duration=float(props.get("timeout") or DEFAULT_TIMEOUT),
        )

    def wait(self, poll: Callable[[], osb.LastOperation], what: str, props: Mapping[str, Any]) -> osb.LastOperation:
        """Poll until done, with this provider's clock (tests fake it)."""
        return osb.wait(
            poll,
            what=what,
            backoff=self.backoff(props),
            clock=self._clock or time.monotonic,
            sleep=self._sleep or time.sleep,
        )


class ServiceInstanceProvider(_OSBProvider):
    """Provision, update and deprovision one service instance at an OSB broker."""

    def check(self, olds: dict[str, Any], news: dict[str, Any], platform: Platform = Platform()) -> CheckResult:
        defaults = {
            **CONNECTION_DEFAULTS,
            "context": platform.context(),
            "organization_guid": platform.project,
            "space_guid": f"{platform.project}-{platform.stack}",
        }
        inputs = _with_defaults(news, defaults)
        if not inputs.get("instance_id"):
            inputs["instance_id"] = olds.get("instance_id") or str(uuid.uuid4())
        required = ("broker_url", "broker_username", "service_id", "plan_id", "organization_guid", "space_guid")
        return CheckResult(inputs, _check_common(inputs, required))

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        olds, news = _props(olds), _props(news)
        replaces = [k for k in INSTANCE_REPLACE_KEYS if olds.get(k) != news.get(k)]
        keys = (*INSTANCE_REPLACE_KEYS, *INSTANCE_UPDATE_KEYS, *CONNECTION_KEYS)
        changed = _changed(olds, news, keys)
        # The same instance id cannot exist twice at the broker: delete first when it is kept.
        same_id = olds.get("instance_id") == news.get("instance_id")
        return DiffResult(changes=bool(changed), replaces=replaces, delete_before_replace=same_id, changed=changed)

    def create(self, props: dict[str, Any]) -> CreateResult:
        p = _props(props)
        instance_id = str(p["instance_id"])
        what = f"provision of instance {instance_id}"
        with self.client(p) as client:
            try:
                result = client.provision(
                    instance_id,
                    service_id=p["service_id"],
                    plan_id=p["plan_id"],
                    organization_guid=p["organization_guid"],
                    space_guid=p["space_guid"],
                    parameters=p.get("parameters"),
                    context=p.get("context"),
                )
                last = self._settle(client, p, result, what, gone_ok=False)
            except Exception as exc:
                if not needs_mitigation(exc):
                    raise
                raise RuntimeError(f"{exc}{self._mitigate(client, p)}") from exc
        outs = {
            **p,
            "dashboard_url": result.dashboard_url,
            "state": last.state,
            "description": last.description,
            "broker_api_version": client.version,
        }
        return CreateResult(instance_id, outs)

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        o, n = _props(olds), _props(news)
        outs = {**n, "dashboard_url": o.get("dashboard_url"), "state": o.get("state"), "description": None}
        if all(o.get(k) == n.get(k) for k in INSTANCE_UPDATE_KEYS):
            return UpdateResult(outs)  # only the connection changed
        instance_id = str(n["instance_id"])
        with self.client(n) as client:
            result = client.update(
                instance_id,
                service_id=n["service_id"],
                plan_id=n["plan_id"] if n.get("plan_id") != o.get("plan_id") else None,
                parameters=n.get("parameters") if n.get("parameters") != o.get("parameters") else None,
                context=n.get("context") if n.get("context") != o.get("context") else None,
                previous_values={"service_id": o.get("service_id"), "plan_id": o.get("plan_id")},
            )
            last = self._settle(client, n, result, f"update of instance {instance_id}", gone_ok=False)
        outs.update(state=last.state, description=last.description, broker_api_version=client.version)
        if result.dashboard_url:
            outs["dashboard_url"] = result.dashboard_url
        return UpdateResult(outs)

    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        """``pulumi refresh``: the instance as the broker holds it, or gone (an empty id) when the broker no
        longer has it. Brokers that serve the fetch (``instances_retrievable``) report plan, parameters and
        dashboard; the others are asked for the last operation without a token, which answers 410 Gone for an
        instance that is no more."""
        p = _props(props)
        instance_id = str(p.get("instance_id") or id_)
        with self.client(p) as client:
            try:
                fetched = client.get_instance(instance_id, service_id=p.get("service_id"), plan_id=p.get("plan_id"))
                if fetched is None:
                    return ReadResult("", {})
                found = {
                    k: fetched[k] for k in ("plan_id", "parameters", "dashboard_url") if fetched.get(k) is not None
                }
                return ReadResult(instance_id, {**p, **found})
            except (osb.OSBError, osb.NotInVersion) as exc:
                why = "it is not in this OSB version" if isinstance(exc, osb.NotInVersion) else str(exc)
                last = client.last_operation(
                    instance_id, operation=None, service_id=p.get("service_id"), plan_id=p.get("plan_id")
                )
        if last.gone:
            return ReadResult("", {})
        note = (
            f"the broker does not serve the instance fetch ({why}) and its last operation does not say the "
            f"instance is gone: refresh kept instance {instance_id} as the state holds it"
        )
        return ReadResult(instance_id, p, note)

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        p = _props(props)
        instance_id = str(p["instance_id"])
        with self.client(p) as client:
            result = client.deprovision(instance_id, service_id=p["service_id"], plan_id=p["plan_id"])
            self._settle(client, p, result, f"deprovision of instance {instance_id}", gone_ok=True)

    def _settle(
        self, client: osb.Client, p: Mapping[str, Any], result: osb.InstanceResult, what: str, *, gone_ok: bool
    ) -> osb.LastOperation:
        """The final state of an operation: immediate for 200/201/410, polled for 202. A 410 while polling
        means done for a deprovision (``gone_ok``) and a failure otherwise."""
        if not result.is_async:
            return osb.LastOperation(state=osb.SUCCEEDED, gone=result.gone)

        def poll() -> osb.LastOperation:
            return client.last_operation(
                str(p["instance_id"]), operation=result.operation, service_id=p["service_id"], plan_id=p["plan_id"]
            )

        last = self.wait(poll, what, p)
        if last.gone and not gone_ok:
            raise osb.OperationFailed(what, "the broker says the instance is gone")
        return last

    def _mitigate(self, client: osb.Client, p: Mapping[str, Any]) -> str:
        """Orphan mitigation after a failed create: ask the broker to delete; report what it said."""
        if p.get("orphan_mitigation") is False:
            return "; orphan mitigation disabled, the instance may remain at the broker"
        try:
            result = client.deprovision(str(p["instance_id"]), service_id=p["service_id"], plan_id=p["plan_id"])
        except (osb.BrokerError, OSError) as exc:
            return f"; orphan mitigation (deprovision) failed too: {exc}"
        return f"; orphan mitigation: deprovision requested (broker answered {result.status})"


class ServiceBindingProvider(_OSBProvider):
    """Bind and unbind at an OSB broker; the bind response's credentials become a secret output."""

    def check(self, olds: dict[str, Any], news: dict[str, Any], platform: Platform = Platform()) -> CheckResult:
        inputs = _with_defaults(news, {**CONNECTION_DEFAULTS, "context": platform.context()})
        if not inputs.get("binding_id"):
            inputs["binding_id"] = olds.get("binding_id") or str(uuid.uuid4())
        required = ("broker_url", "broker_username", "instance_id", "service_id", "plan_id")
        return CheckResult(inputs, _check_common(inputs, required))

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        olds, news = _props(olds), _props(news)
        replaces = [k for k in BINDING_REPLACE_KEYS if olds.get(k) != news.get(k)]
        changed = [*replaces, *_changed(olds, news, CONNECTION_KEYS)]
        same_id = olds.get("binding_id") == news.get("binding_id")
        return DiffResult(changes=bool(changed), replaces=replaces, delete_before_replace=same_id, changed=changed)

    def create(self, props: dict[str, Any]) -> CreateResult:
        p = _props(props)
        instance_id, binding_id = str(p["instance_id"]), str(p["binding_id"])
        what = f"bind {binding_id} to instance {instance_id}"
        with self.client(p) as client:
            try:
                result = client.bind(
                    instance_id,
                    binding_id,
                    service_id=p["service_id"],
                    plan_id=p["plan_id"],
                    parameters=p.get("parameters"),
                    bind_resource=p.get("bind_resource"),
                    context=p.get("context"),
                )
                if result.is_async:
                    self._poll(client, p, result.operation, what, gone_ok=False)
                    result = client.get_binding(
                        instance_id, binding_id, service_id=p["service_id"], plan_id=p["plan_id"]
                    )
            except Exception as exc:
                if not needs_mitigation(exc):
                    raise
                raise RuntimeError(f"{exc}{self._mitigate(client, p)}") from exc
        outs = {
            **p,
            "credentials": result.credentials or {},
            "syslog_drain_url": result.syslog_drain_url,
            "route_service_url": result.route_service_url,
            "volume_mounts": result.volume_mounts,
            "broker_api_version": client.version,
        }
        return CreateResult(binding_id, outs)

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        # Only connection settings reach here (everything else replaces): keep what the broker returned.
        o = _props(olds)
        kept = {
            k: o.get(k)
            for k in ("credentials", "syslog_drain_url", "route_service_url", "volume_mounts", "broker_api_version")
        }
        return UpdateResult({**_props(news), **kept})

    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        """``pulumi refresh``: the binding as the broker serves it (fresh credentials, for a broker that
        rotates them), or gone (an empty id). Brokers that do not serve the fetch (``bindings_retrievable``)
        are asked for the last operation without a token: 410 Gone means the binding is no more."""
        p = _props(props)
        instance_id, binding_id = str(p["instance_id"]), str(p.get("binding_id") or id_)
        with self.client(p) as client:
            try:
                fetched = client.get_binding(instance_id, binding_id, service_id=p["service_id"], plan_id=p["plan_id"])
                fresh = {
                    "credentials": fetched.credentials or {},
                    "syslog_drain_url": fetched.syslog_drain_url,
                    "route_service_url": fetched.route_service_url,
                    "volume_mounts": fetched.volume_mounts,
                }
                return ReadResult(binding_id, {**p, **fresh})
            except (osb.NotFound, osb.Gone):
                return ReadResult("", {})
            except osb.NotInVersion:
                note = f"OSB {client.version} can tell neither binding {binding_id} nor its absence: refresh kept it"
                return ReadResult(binding_id, p, note)
            except osb.OSBError as exc:
                last = client.binding_last_operation(
                    instance_id, binding_id, operation=None, service_id=p["service_id"], plan_id=p["plan_id"]
                )
                why = str(exc)
        if last.gone:
            return ReadResult("", {})
        note = (
            f"the broker does not serve the binding fetch ({why}) and its last operation does not say the "
            f"binding is gone: refresh kept binding {binding_id} as the state holds it"
        )
        return ReadResult(binding_id, p, note)

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        p = _props(props)
        instance_id, binding_id = str(p["instance_id"]), str(p["binding_id"])
        with self.client(p) as client:
            result = client.unbind(instance_id, binding_id, service_id=p["service_id"], plan_id=p["plan_id"])
            if result.is_async:
                self._poll(client, p, result.operation, f"unbind {binding_id} from {instance_id}", gone_ok=True)

    def _poll(
        self, client: osb.Client, p: Mapping[str, Any], operation: str | None, what: str, *, gone_ok: bool
    ) -> osb.LastOperation:
        def poll() -> osb.LastOperation:
            return client.binding_last_operation(
                str(p["instance_id"]),
                str(p["binding_id"]),
                operation=operation,
                service_id=p["service_id"],
                plan_id=p["plan_id"],
            )

        last = self.wait(poll, what, p)
        if last.gone and not gone_ok:
            raise osb.OperationFailed(what, "the broker says the binding is gone")
        return last

    def _mitigate(self, client: osb.Client, p: Mapping[str, Any]) -> str:
        if p.get("orphan_mitigation") is False:
            return "; orphan mitigation disabled, the binding may remain at the broker"
        try:
            result = client.unbind(
                str(p["instance_id"]), str(p["binding_id"]), service_id=p["service_id"], plan_id=p["plan_id"]
            )
        except (osb.BrokerError, OSError) as exc:
            return f"; orphan mitigation (unbind) failed too: {exc}"
        return f"; orphan mitigation: unbind requested (broker answered {result.status})"
