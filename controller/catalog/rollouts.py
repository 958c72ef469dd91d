"""Rolling a plan change out to existing instances: preview the per-instance diff, then mass update.

Preview (``opbroker plan diff``): for every instance of a plan, render ``provision`` with the current plan
and with the proposed one — same registry, same live sources, so generated values are equal on both sides
(values the current render generates are handed to the proposed one) — and show a unified diff of the
objects. :func:`preview` and :func:`summarize` are pure; :func:`subjects` reads what they need.

Mass update (``opbroker plan update-instances``): mark the plan's instances for re-render by writing
``status.state: update`` — exactly what the broker writes for an OSB update, so the controller (and, with
multi-cluster, the sister cluster's controller) re-renders them — page by page with the API's ``continue``
token, paced to ``rate`` writes per second. :func:`verdict` (which instances, and why not the others) and
:class:`Pacer` are pure; :func:`update_instances` does the listing and writing.
"""

from __future__ import annotations

import base64
import dataclasses
import difflib
import hashlib
import json
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

import yaml
from kubernetes.client.exceptions import ApiException

from opbroker.api import TemplateAction
from opbroker.api import adminrequests as wire
from opbroker.api.catalog import SFPlan
from opbroker.api.meta import ResourceRef
from opbroker.api.osb import OperationState
from opbroker.controller.catalog.core.rollout_views import PlanView, RolloutInstance
from opbroker.controller.core.template_inputs import template_inputs
from opbroker.controller.core.views import EntryView, InstanceView, Meta, SecretView
from opbroker.controller.kinds import INSTANCES, PLANS, SERVICES
from opbroker.controller.multicluster.core.views import SFClusterView
from opbroker.controller.osb import registries
from opbroker.controller.runtime.clock import SYSTEM, Clock
from opbroker.controller.runtime.kube import Kube
from opbroker.controller.runtime.policies import DEFAULTS, Policies
from opbroker.kubeclient.wire import JsonBody, JsonObject
from opbroker.osbclient import Backoff
from opbroker.rendering import Renderer, RenderError, RenderInputs
from opbroker.rendering.output import RenderedObject

Fetch = Callable[[dict[str, ResourceRef]], Mapping[str, JsonObject | None]]

# -- preview (pure) ----------------------------------------------------------------------------------------


class Change(StrEnum):
    CHANGED = "changed"
    UNCHANGED = "unchanged"
    FAILING = "failing"


@dataclass(frozen=True)
class InstanceDiff:
    namespace: str
    name: str
    change: Change
    diff: str = ""
    error: str | None = None
    """Why the proposed plan does not render for this instance (FAILING), or could not be previewed."""
    note: str | None = None
    """Something worth knowing that does not block the rollout (the current plan does not render)."""

    def to_wire(self) -> wire.InstancePreview:
        """This instance's preview as the admin API and ``plan diff --output json`` answer it: the diff cut to the
        wire's bound, the error and note texts to 2 KiB (a template error may quote a long line)."""
        text, truncated = wire.cut(self.diff)
        return wire.InstancePreview(
            namespace=self.namespace,
            name=self.name,
            change=self.change.value,
            diff=text,
            truncated=truncated,
            error=short(self.error),
            note=short(self.note),
        )


def short(text: str | None, limit: int = 2048) -> str | None:
    """Texts in answers are bounded too (a template error may quote a long line)."""
    return text if text is None or len(text) <= limit else text[:limit] + "…"


@dataclass(frozen=True)
class Subject:
    """One instance and what rendering it needs, read from its cluster."""

    instance: RolloutInstance
    registry: JsonObject | None
    fetch: Fetch
    service: JsonObject | None = None
    problem: str | None = None
    """Set when the instance's inputs could not be read (its cluster did not answer, say)."""


@dataclass(frozen=True)
class Summary:
    changed: int = 0
    unchanged: int = 0
    failing: int = 0

    @property
    def total(self) -> int:
        return self.changed + self.unchanged + self.failing

    def __str__(self) -> str:
        return (
            f"{self.total} instance(s): {self.changed} changed, {self.unchanged} unchanged, "
            f"{self.failing} failing to render"
        )


def manifests_text(objects: Iterable[RenderedObject]) -> str:
    """Rendered objects as canonical YAML (sorted by identity and keys), the text the diff compares."""

    def identity(obj: RenderedObject) -> tuple[str, str, str, str]:
        ref = obj.ref  # the renderer makes sure every object has these
        return ref.api_version, ref.kind, ref.namespace or "", ref.name

    documents = [
        yaml.safe_dump(redacted(obj.manifest), sort_keys=True, default_flow_style=False)
        for obj in sorted(objects, key=identity)
    ]
    return "---\n".join(documents)


#: The fields of a Secret whose values a diff never shows.
SECRET_FIELDS = ("data", "stringData")


def redacted(manifest: JsonObject) -> JsonObject:
    """A Secret's values replaced by a digest of each (a change still shows, the value never: generated passwords
    and keys live there, and a preview's answer is stored in a ConfigMap); any other object as it is."""
    if manifest.get("apiVersion") != "v1" or manifest.get("kind") != "Secret":
        return manifest
    shown = dict(manifest)
    for field_name in SECRET_FIELDS:
        values = manifest.get(field_name)
        if isinstance(values, Mapping):
            shown[field_name] = {key: _digest(value) for key, value in values.items()}
    return shown


def _digest(value: object) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return f"(redacted, sha256 {hashlib.sha256(text.encode()).hexdigest()[:12]})"


def unified(current: str, proposed: str, label: str, *, context: int = 3) -> str:
    lines = difflib.unified_diff(
        current.splitlines(keepends=True),
        proposed.splitlines(keepends=True),
        fromfile=f"{label} (current plan)",
        tofile=f"{label} (new plan)",
        n=context,
    )
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


def _inputs(
    subject: Subject,
    plan_body: JsonObject,
    registry: JsonObject | None,
    service: JsonObject | None,
    control_plane: str,
) -> RenderInputs:
    return template_inputs(
        subject.instance.view, control_plane=control_plane, service=service, plan=plan_body, registry=registry
    )


def _render(renderer: Renderer, plan: SFPlan, inputs: RenderInputs, fetch: Fetch) -> tuple[str, JsonObject]:
    sources = fetch(renderer.render_sources(plan, inputs))
    rendered = renderer.render_objects(plan, TemplateAction.PROVISION, dataclasses.replace(inputs, sources=sources))
    return manifests_text(rendered.objects), rendered.registry


def preview(
    renderer: Renderer,
    subject: Subject,
    *,
    current: tuple[SFPlan, JsonObject],
    proposed: tuple[SFPlan, JsonObject],
    proposed_service: JsonObject | None = None,
    control_plane: str,
    context: int = 3,
) -> InstanceDiff:
    """How one instance's ``provision`` objects change from the current plan to the proposed one.
    ``control_plane``: the control plane's namespace (where honouring a context namespace is the broker's call)."""
    namespace, name = subject.instance.key
    if subject.problem is not None:
        return InstanceDiff(namespace, name, Change.FAILING, error=subject.problem)
    note = None
    try:
        before, registry = _render(
            renderer,
            current[0],
            _inputs(subject, current[1], subject.registry, subject.service, control_plane),
            subject.fetch,
        )
    except RenderError as exc:
        before, registry = "", dict(subject.registry or {})
        note = f"the current plan does not render for it either: {exc}"
    except ApiException as exc:  # a live source the acting user may not read (403), or the API failing
        return InstanceDiff(namespace, name, Change.FAILING, error=f"cannot read its sources: {_reason(exc)}")
    try:
        after, _ = _render(
            renderer,
            proposed[0],
            _inputs(subject, proposed[1], registry, proposed_service or subject.service, control_plane),
            subject.fetch,
        )
    except RenderError as exc:
        return InstanceDiff(namespace, name, Change.FAILING, error=str(exc), note=note)
    except ApiException as exc:
        return InstanceDiff(
            namespace, name, Change.FAILING, error=f"cannot read its sources: {_reason(exc)}", note=note
        )
    if before == after:
        return InstanceDiff(namespace, name, Change.UNCHANGED, note=note)
    return InstanceDiff(
        namespace, name, Change.CHANGED, diff=unified(before, after, f"{namespace}/{name}", context=context), note=note
    )


def _reason(exc: ApiException) -> str:
    """An API error in one line: its status and reason (a :class:`~opbroker.controller.runtime.kube.Refused` says
    whom)."""
    text = str(exc) if type(exc) is not ApiException else f"{exc.status} {exc.reason}"
    return text.splitlines()[0] if text else f"HTTP {exc.status}"


def summarize(diffs: Iterable[InstanceDiff]) -> Summary:
    counted = Counter(d.change for d in diffs)
    return Summary(counted[Change.CHANGED], counted[Change.UNCHANGED], counted[Change.FAILING])


# -- preview inputs (I/O) ----------------------------------------------------------------------------------


def pages(kube: Kube, *, namespace: str | None, limit: int) -> Iterator[list[JsonBody]]:
    """Every instance (of ``namespace``, or all), ``limit`` at a time, following the ``continue`` token.

    A token that expired (HTTP 410) starts the list again from the beginning; callers skip what they did.
    """
    token: str | None = None
    while True:
        try:
            items, token, _ = kube.list_custom_page(INSTANCES, namespace, limit=limit, token=token)
        except ApiException as exc:
            if exc.status == 410 and token:
                token = None
                continue
            raise
        yield items
        if not token:
            return


def subjects(
    kube: Kube,
    plan_id: str,
    *,
    namespace: str | None,
    service: JsonObject | None,
    cluster_kube: Callable[[str], Kube],
    registry_namespace: str,
    acting: str | None,
    page_size: int = 200,
    after: str | None = None,
) -> Iterator[Subject]:
    """The plan's instances (not being deleted) with their registries and a live-sources fetcher.

    ``cluster_kube`` gives the API of the cluster an instance is placed on (its registry and the objects
    its templates read live there); it may raise, and the instance is then reported, not skipped.
    ``registry_namespace``: where the controller keeps registries there (its ``--registry-namespace``).
    ``after``: only the instances after this ``namespace/name`` in the API server's list order (its storage key
    order, which is this string's), a cursor for pages of previews.
    ``acting``: the user the templates' live reads (``sources``) act as — the plan's account, as every render
    of the controller's (issue 42: the preview once read them with the controller's own rights); None: the
    door's own identity (``opbroker plan diff`` runs with its user's).
    """
    for page in pages(kube, namespace=namespace, limit=page_size):
        for body in page:
            instance = RolloutInstance.of(body)
            if instance.view.plan_id != plan_id or instance.meta.deleting:
                continue
            if after is not None and instance.where <= after:
                continue
            cluster = instance.cluster_id
            try:
                where = cluster_kube(cluster)
                # Registries are named by the uid of the instance the cluster's controller reconciles: on a
                # sister cluster that is its replica, not the master's object.
                namespace_, name = instance.key
                local = where.get_custom(INSTANCES, namespace_, name) if cluster else None
                owner = local if local is not None else dict(instance.wire)
                registry = registries.read(
                    where,
                    registries.place(Meta.of(owner.get("metadata")), kind="instance", namespace=registry_namespace),
                )
            except Exception as exc:
                yield Subject(instance, None, _nothing, service, problem=f"cannot read from cluster {cluster!r}: {exc}")
                continue
            yield Subject(instance, registry, _fetcher(where.acting_as(acting)), service)


def may_impersonate(kube: Kube, user: str) -> bool:
    """Whether the door's own identity may impersonate the ServiceAccount user ``user``
    (``system:serviceaccount:NS:NAME``): a SelfSubjectAccessReview, which every authenticated user may ask."""
    namespace, _, name = user.removeprefix(SERVICE_ACCOUNT_PREFIX).partition(":")
    if not user.startswith(SERVICE_ACCOUNT_PREFIX) or not name:
        raise ValueError(f"{user!r} is not a ServiceAccount's user name")
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {
            "resourceAttributes": {
                "verb": "impersonate",
                "resource": "serviceaccounts",
                "namespace": namespace,
                "name": name,
            }
        },
    }
    answer = kube.custom.request("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", body=review)
    status = answer.get("status") if isinstance(answer, dict) else None
    return bool(isinstance(status, dict) and status.get("allowed"))


SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"


def _fetcher(kube: Kube) -> Fetch:
    return lambda refs: {name: kube.get(ref) for name, ref in refs.items()}


def _nothing(refs: dict[str, ResourceRef]) -> Mapping[str, JsonObject | None]:
    return {name: None for name in refs}


def decode_kubeconfig(secret: JsonObject | None, key: str = "kubeconfig") -> str | None:
    encoded = None if secret is None else SecretView.of(secret).data.get(key)
    return base64.b64decode(encoded).decode("utf-8") if encoded else None


def find_plan(kube: Kube, namespace: str, wanted: str) -> PlanView | None:
    """The SFPlan of ``namespace`` whose name, OSB id or OSB name is ``wanted``."""
    return next((p for p in map(PlanView.of, kube.list_custom(PLANS, namespace)) if p.answers_to(wanted)), None)


def find_service(kube: Kube, namespace: str, service_id: str) -> JsonObject | None:
    """The SFService of ``namespace`` with that OSB id (as read: the renderer's input)."""
    return next((s for s in kube.list_custom(SERVICES, namespace) if EntryView.of(s).osb_id == service_id), None)


def cluster_kubes(kube: Kube, namespace: str) -> Callable[[str], Kube]:
    """Instance cluster id → the API holding its registry and sources (the master for "" and "1")."""
    from opbroker.controller.multicluster.clusters import CLUSTERS, KUBECONFIG_KEY
    from opbroker.controller.multicluster.core.scheduling import MASTER
    from opbroker.controller.multicluster.sisters import SisterKube, client_from_kubeconfig

    cache: dict[str, Kube] = {"": kube, MASTER: kube}

    def lookup(cluster: str) -> Kube:
        if cluster not in cache:
            body = kube.get_custom(CLUSTERS, namespace, cluster)
            if body is None:
                raise LookupError(f"no SFCluster {cluster!r} in namespace {namespace!r}")
            secret_ref = SFClusterView.of(body).secret_ref
            if not secret_ref:
                raise LookupError(f"the SFCluster {cluster!r} names no kubeconfig Secret")
            text = decode_kubeconfig(kube.read_secret(namespace, secret_ref), KUBECONFIG_KEY)
            if text is None:
                raise LookupError(f"the Secret {namespace}/{secret_ref} holds no kubeconfig")
            cache[cluster] = SisterKube(client_from_kubeconfig(text))
        return cache[cluster]

    return lookup


def previews(
    kube: Kube,
    renderer: Renderer,
    *,
    namespace: str,
    registry_namespace: str,
    current_body: JsonObject,
    proposed: SFPlan,
    proposed_service: JsonObject | None,
    instance_namespace: str | None,
    acting: str | None,
    context: int = 3,
    after: str | None = None,
) -> Iterator[InstanceDiff]:
    """:func:`preview` for each instance of the plan ``current_body`` (in list order, namespace then name):
    what ``opbroker plan diff`` prints and the admin API's preview answers."""
    current = SFPlan.model_validate(current_body)
    proposed_body = {**proposed.to_manifest(), "metadata": {**PlanView.of(current_body).metadata}}
    service = find_service(kube, namespace, current.spec.service_id)
    for subject in subjects(
        kube,
        current.spec.id,
        namespace=instance_namespace,
        service=service,
        cluster_kube=cluster_kubes(kube, namespace),
        registry_namespace=registry_namespace,
        acting=acting,
        after=after,
    ):
        yield preview(
            renderer,
            subject,
            current=(current, dict(current_body)),
            proposed=(proposed, proposed_body),
            proposed_service=proposed_service,
            context=context,
            control_plane=namespace,
        )


# -- mass update ---------------------------------------------------------------------------------------------


class Skip(StrEnum):
    """Why an instance is not marked for update."""

    OTHER_PLAN = "of another plan"
    DELETING = "being deleted"
    BUSY = "an operation is pending or in progress"
    CURRENT = "already rendered from the current plan"
    MARKED = "marked already in this run"


BUSY_STATES = frozenset(
    {
        None,
        OperationState.IN_QUEUE.value,
        OperationState.UPDATE.value,
        OperationState.IN_PROGRESS.value,
        OperationState.DELETE.value,
    }
)


def verdict(
    instance: RolloutInstance,
    *,
    plan_id: str,
    plan_hash: str | None,
    only_outdated: bool,
    marked: set[tuple[str, str]],
) -> Skip | None:
    """None if ``instance`` is to be marked for re-render, else why not. Pure."""
    view = instance.view
    if view.plan_id != plan_id:
        return Skip.OTHER_PLAN
    if instance.key in marked:
        return Skip.MARKED
    if view.meta.deleting:
        return Skip.DELETING
    if view.status.state in BUSY_STATES:
        return Skip.BUSY
    if only_outdated and plan_hash is not None and view.applied_plan_hash == plan_hash:
        return Skip.CURRENT
    return None


@dataclass
class Pacer:
    """At most ``rate`` calls of :meth:`wait` per second, evenly spaced (no bursts)."""

    rate: float
    clock: Callable[[], float] = SYSTEM.monotonic
    sleep: Callable[[float], None] = SYSTEM.block
    _next: float | None = None

    def wait(self) -> None:
        now = self.clock()
        if self._next is not None and now < self._next:
            self.sleep(self._next - now)
            now = self._next
        self._next = now + 1.0 / self.rate


@dataclass
class UpdateReport:
    marked: list[tuple[str, str]] = field(default_factory=list)
    skipped: Counter[Skip] = field(default_factory=Counter)
    pages: int = 0
    unsettled: list[tuple[str, str]] = field(default_factory=list)
    """Marked instances still busy when ``wait`` timed out."""
    stopped: bool = False
    """``should_stop`` said so before every instance was seen (the admin API's cancel)."""


def update_instances(
    kube: Kube,
    *,
    plan_id: str,
    plan_hash: str | None,
    namespace: str | None,
    batch_size: int,
    pacer: Pacer,
    only_outdated: bool = False,
    dry_run: bool = False,
    wait: float | None = None,
    report: Callable[[str], None] = lambda _line: None,
    should_stop: Callable[[], bool] = lambda: False,
    progress: Callable[[UpdateReport], None] = lambda _report: None,
    policies: Policies = DEFAULTS,
    clock: Clock = SYSTEM,
) -> UpdateReport:
    """Mark the plan's instances for re-render, ``batch_size`` per page; ``wait`` seconds per page for them
    to finish (None: do not wait). ``should_stop`` is asked before each mark (the admin API's cancel: what
    is marked stays marked), ``progress`` is told the counts after each page. ``policies``: the timing table
    (a mark's conflicts are retried on its ``write_retries``, the settling is polled every ``rollout_settle``);
    ``clock``: what the settling's deadline reads and its polls wait on (the real one by default)."""
    result = UpdateReport()
    seen: set[tuple[str, str]] = set()
    for page in pages(kube, namespace=namespace, limit=batch_size):
        result.pages += 1
        batch: list[tuple[str, str]] = []
        for body in page:
            instance = RolloutInstance.of(body)
            if should_stop():
                result.stopped = True
                progress(result)
                return result
            reason = verdict(instance, plan_id=plan_id, plan_hash=plan_hash, only_outdated=only_outdated, marked=seen)
            if reason is Skip.OTHER_PLAN:
                continue
            if reason is not None:
                result.skipped[reason] += 1
                continue
            if not dry_run:
                pacer.wait()
                if should_stop():  # asked again: the wait may have been long
                    result.stopped = True
                    progress(result)
                    return result
                if not _mark(
                    kube, instance, plan_id=plan_id, plan_hash=plan_hash, only_outdated=only_outdated, policies=policies
                ):
                    result.skipped[Skip.BUSY] += 1
                    continue
            batch.append(instance.key)
            result.marked.append(instance.key)
            seen.add(instance.key)
        if batch:
            verb = "would mark" if dry_run else "marked"
            report(f"page {result.pages}: {verb} {len(batch)}: " + ", ".join(f"{ns}/{name}" for ns, name in batch))
        if batch and wait is not None and not dry_run:
            result.unsettled += _settle(kube, batch, timeout=wait, every=policies.rollout_settle, clock=clock)
        progress(result)
    return result


def _mark(
    kube: Kube,
    instance: RolloutInstance,
    *,
    plan_id: str,
    plan_hash: str | None,
    only_outdated: bool,
    policies: Policies = DEFAULTS,
) -> bool:
    """Write ``state: update`` unless the instance moved on meanwhile (then decided again on a fresh read, in
    place on the table's ``write_retries``: a rollout runs outside any reconcile, no runtime repeats it)."""
    namespace, name = instance.key
    for _ in policies.attempts(policies.write_retries):
        try:
            kube.patch_custom_status(
                INSTANCES,
                namespace,
                name,
                {
                    "state": OperationState.UPDATE.value,
                    "description": "update requested for the whole plan (mass update)",
                },
                resource_version=instance.meta.resource_version,
            )
            return True
        except ApiException as exc:
            if exc.status != 409:
                raise
        body = kube.get_custom(INSTANCES, namespace, name, fresh=True)
        if body is None:
            return False
        instance = RolloutInstance.of(body)
        if verdict(instance, plan_id=plan_id, plan_hash=plan_hash, only_outdated=only_outdated, marked=set()):
            return False
    return False


def _settle(
    kube: Kube,
    batch: list[tuple[str, str]],
    *,
    timeout: float,
    every: Backoff = DEFAULTS.rollout_settle,
    clock: Clock = SYSTEM,
) -> list[tuple[str, str]]:
    """Wait until every instance of the batch has an outcome again (looking ``every``); the ones that did not,
    by the deadline."""
    deadline = clock.monotonic() + timeout
    waiting = list(batch)
    while waiting and clock.monotonic() < deadline:
        clock.block(every.delay(1))
        still = []
        for namespace, name in waiting:
            found = kube.get_custom(INSTANCES, namespace, name)
            if found is not None and InstanceView.of(found).status.state in BUSY_STATES:
                still.append((namespace, name))
        waiting = still
    return waiting
