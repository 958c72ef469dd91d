"""``abandon`` (issue 43, "a way out"): the pure decisions tabled, then their I/O against ``FakeKube``, then the CLI
edge through typer's runner (no cluster: the cluster test is ``test_abandon.py``)."""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from typer.testing import CliRunner

from opbroker.api.catalog import DeletionPolicy
from opbroker.api.conventions import (
    ANNOTATION_ABANDONED_BY,
    ANNOTATION_ABANDONED_REASON,
    ANNOTATION_OWNER_UID,
    ANNOTATION_SINGLETON_USERS,
    CREDENTIALS_KEY,
    FINALIZER,
    LABEL_MANAGED_BY,
    credentials_secret_name,
)
from opbroker.api.meta import ResourceRef
from opbroker.controller.core import decisions
from opbroker.controller.core.views import BindingView, InstanceView, ObjectView
from opbroker.controller.kinds import BINDINGS, INSTANCES
from opbroker.controller.osb import abandoning
from opbroker.controller.osb.core import abandon
from opbroker.controller.osb.core.abandon import Fate
from opbroker.controller.runtime.objects import recorded, ref_key, stamp
from tests.fake_kube import FakeKube

NS = "team"
UID = "u-inst"
FOREIGN = "example.com/keep"


def instance_body(
    *,
    deleting: bool = True,
    held: bool = True,
    resources: Sequence[ResourceRef] = (),
    orphans: Sequence[ResourceRef] = (),
    name: str = "db",
    uid: str = UID,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NS, "uid": uid, "resourceVersion": "5"}
    if held:
        meta["finalizers"] = [FINALIZER]
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    status = {"resources": recorded(list(resources), orphans)} if resources else {}
    return {"apiVersion": INSTANCES.api_version, "kind": "SFServiceInstance", "metadata": meta,
            "spec": {"instanceId": name, "planId": "p"}, "status": status}  # fmt: skip


def binding_body(
    name: str, *, instance: str = "db", deleting: bool = False, held: bool = True, resources: Sequence[ResourceRef] = ()
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NS, "uid": f"u-{name}", "resourceVersion": "6"}
    if held:
        meta["finalizers"] = [FINALIZER]
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    status = {"resources": recorded(list(resources))} if resources else {}
    return {"apiVersion": BINDINGS.api_version, "kind": "SFServiceBinding", "metadata": meta,
            "spec": {"id": name, "instanceId": instance}, "status": status}  # fmt: skip


def cm_ref(name: str) -> ResourceRef:
    return ResourceRef(api_version="v1", kind="ConfigMap", name=name, namespace=NS)


def live_cm(name: str, *, stamped: str | None = UID, owners: Sequence[str] = (UID,), **meta: Any) -> ObjectView:
    metadata: dict[str, Any] = {"name": name, "namespace": NS, "uid": f"cm-{name}", "resourceVersion": "9", **meta}
    if stamped:
        metadata["annotations"] = {ANNOTATION_OWNER_UID: stamped}
        metadata["labels"] = {LABEL_MANAGED_BY: "opbroker"}
    if owners:
        metadata["ownerReferences"] = [{"apiVersion": "x/v1", "kind": "K", "name": "o", "uid": u} for u in owners]
    return ObjectView.of({"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata})


# -- one recorded object --------------------------------------------------------------------------------------

DELETE, ORPHAN = DeletionPolicy.DELETE, DeletionPolicy.ORPHAN

OBJECT_ROWS = [
    ("delete policy, ours alone: deleted", live_cm("a"), DELETE, True, Fate.DELETE),
    ("delete policy, stamped only (another namespace): deleted", live_cm("a", owners=()), DELETE, True, Fate.DELETE),
    ("delete policy, shared with another owner: our share dropped", live_cm("a", owners=(UID, "u-other")), DELETE,
     True, Fate.UNOWN),
    ("delete policy, not ours: never touched", live_cm("a", stamped=None, owners=()), DELETE, True, Fate.LEAVE),
    ("delete policy, stamped for someone else: never touched", live_cm("a", stamped="u-x", owners=()), DELETE, True,
     Fate.LEAVE),
    ("delete policy, being deleted already: not waited for",
     live_cm("a", deletionTimestamp="2026-01-01T00:00:00Z"), DELETE, True, Fate.DELETING),
    ("delete policy, gone", None, DELETE, True, Fate.GONE),
    ("unreadable with the caller's rights: not ours to touch", live_cm("a"), DELETE, False, Fate.LEAVE),
    ("orphan policy, ours: orphaned", live_cm("a"), ORPHAN, True, Fate.ORPHAN),
    ("orphan policy, shared: our share dropped, left in place", live_cm("a", owners=(UID, "u-other")), ORPHAN, True,
     Fate.ORPHAN),
    ("orphan policy, orphaned before (no stamp, no reference)", live_cm("a", stamped=None, owners=()), ORPHAN, True,
     Fate.ORPHANED),
    ("orphan policy, being deleted by someone", live_cm("a", deletionTimestamp="2026-01-01T00:00:00Z"), ORPHAN, True,
     Fate.DELETING),
    ("orphan policy, gone", None, ORPHAN, True, Fate.GONE),
]  # fmt: skip


@pytest.mark.parametrize(("live", "policy", "readable", "fate"), [r[1:] for r in OBJECT_ROWS],
                         ids=[r[0] for r in OBJECT_ROWS])  # fmt: skip
def test_each_recorded_object_is_let_go_of_per_its_policy_and_only_when_ours(
    live: ObjectView | None, policy: DeletionPolicy, readable: bool, fate: Fate
) -> None:
    step = abandon.object_step(cm_ref("a"), live, owner_uid=UID, policy=policy, readable=readable)
    assert step.fate is fate
    if fate is Fate.ORPHAN:
        assert step.patch == decisions.orphaning(live, owner_uid=UID)  # the teardown's own patch, version-guarded
        assert step.patch is not None and step.patch["resourceVersion"] == "9"
    else:
        assert step.patch is None


# -- refusals -------------------------------------------------------------------------------------------------


def plan(body: dict[str, Any] | None, bindings: Sequence[dict[str, Any]] = (), *, with_bindings: bool = False,
         live: abandon.Live | None = None) -> abandon.AbandonPlan:  # fmt: skip
    view = InstanceView.of(body) if body is not None else None
    return abandon.plan_instance(view, [BindingView.of(b) for b in bindings], live or {}, namespace=NS, name="db",
                                 with_bindings=with_bindings)  # fmt: skip


def test_refused_when_missing_not_being_deleted_or_not_held() -> None:
    assert plan(None).refusal == "SFServiceInstance team/db does not exist"
    not_deleting = plan(instance_body(deleting=False)).refusal
    assert not_deleting is not None and "is not being deleted" in not_deleting
    assert "Delete it first (kubectl delete sfserviceinstance -n team db)" in not_deleting
    not_held = plan(instance_body(held=False)).refusal
    assert not_held is not None and "does not carry opbroker's finalizer" in not_held
    assert plan(instance_body()).refusal is None


def test_refused_while_bindings_live_unless_with_bindings() -> None:
    bindings = [
        binding_body("b2"),
        binding_body("b1", deleting=True),
        binding_body("elsewhere", instance="other"),  # another instance's
        binding_body("leaving", deleting=True, held=False),  # gone as far as the instance goes
    ]
    refused = plan(instance_body(), bindings).refusal
    assert refused is not None
    assert "still has 2 binding(s): b1, b2" in refused and "--with-bindings" in refused
    taken = plan(instance_body(), bindings, with_bindings=True)
    assert taken.refusal is None
    assert [t.meta.name for t in taken.all] == ["b1", "b2", "db"]  # the bindings first, then the instance
    assert [t.delete_first for t in taken.all] == [False, True, False]  # b2 is not being deleted yet


def test_a_binding_alone_is_refused_unless_being_deleted_and_held() -> None:
    def of(body: dict[str, Any] | None) -> str | None:
        view = BindingView.of(body) if body is not None else None
        return abandon.plan_binding(view, {}, namespace=NS, name="b1").refusal

    assert of(None) == "SFServiceBinding team/b1 does not exist"
    assert "unbind" in (of(binding_body("b1")) or "")
    assert "finalizer" in (of(binding_body("b1", deleting=True, held=False)) or "")
    assert of(binding_body("b1", deleting=True)) is None


def test_what_each_object_becomes_instance_and_binding() -> None:
    refs = [cm_ref("data"), cm_ref("keep"), cm_ref("foreign"), cm_ref("gone")]
    body = instance_body(resources=refs, orphans=[cm_ref("keep")])
    binding = binding_body("b1", resources=[cm_ref("grant")])
    secret = ResourceRef(api_version="v1", kind="Secret", name=credentials_secret_name("b1"), namespace=NS)
    live = {
        ref_key(cm_ref("data")): live_cm("data"),
        ref_key(cm_ref("keep")): live_cm("keep"),
        ref_key(cm_ref("foreign")): live_cm("foreign", stamped=None, owners=()),
        ref_key(cm_ref("grant")): live_cm("grant", stamped="u-b1", owners=("u-b1",)),
        ref_key(secret): live_cm("creds", stamped="u-b1", owners=("u-b1",)),
    }
    taken = plan(body, [binding], with_bindings=True, live=live)
    b1, db = taken.all
    assert [(s.named, s.policy.value, s.fate.value) for s in b1.objects] == [
        ("ConfigMap team/grant", "delete", "delete"),
        ("Secret team/b1-credentials", "delete", "delete"),  # the credentials Secret: always deleted when the binding's
    ]
    assert [(s.named, s.policy.value, s.fate.value) for s in db.objects] == [
        ("ConfigMap team/data", "delete", "delete"),
        ("ConfigMap team/keep", "orphan", "orphan"),
        ("ConfigMap team/foreign", "delete", "leave"),
        ("ConfigMap team/gone", "delete", "gone"),
    ]
    assert abandon.to_read(BindingView.of(binding)) == (cm_ref("grant"), secret)
    message = abandon.event_message(db, reason="operator removed", by="alice")
    assert message.startswith("abandoned by alice: operator removed — opbroker's finalizer removed")
    assert "1 deleted, 0 released (shared), 1 orphaned, 1 left (not ours)" in message
    assert "an unknown user" in abandon.event_message(db, reason="r", by=None)


# -- the I/O, against FakeKube --------------------------------------------------------------------------------


def world() -> tuple[FakeKube, dict[str, Any], dict[str, Any]]:
    """A fake cluster: instance ``db`` (being deleted, opbroker's and a foreign finalizer) recording a ConfigMap to
    delete, one to orphan and one not its own; binding ``b1`` (not being deleted) with its ConfigMap and credentials
    Secret; both registries in the control plane's namespace."""
    kube = FakeKube()
    instance = kube.create_custom(INSTANCES, {
        "apiVersion": INSTANCES.api_version, "kind": "SFServiceInstance",
        "metadata": {"name": "db", "namespace": NS, "finalizers": [FINALIZER, FOREIGN]},
        "spec": {"instanceId": "db", "planId": "p"},
    })  # fmt: skip
    binding = kube.create_custom(BINDINGS, {
        "apiVersion": BINDINGS.api_version, "kind": "SFServiceBinding",
        "metadata": {"name": "b1", "namespace": NS, "finalizers": [FINALIZER]},
        "spec": {"id": "b1", "instanceId": "db"},
    })  # fmt: skip
    iv, bv = InstanceView.of(instance), BindingView.of(binding)
    for name, owner in (("data", iv), ("keep", iv), ("grant", bv)):
        kube.create(stamp({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": NS}},
                          owner=owner, labels={}, owned=True))  # fmt: skip
    kube.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "foreign", "namespace": NS}})
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "b1-credentials", "namespace": NS},
              "data": {CREDENTIALS_KEY: base64.b64encode(b'{"password": "s3cret-value"}').decode()}}  # fmt: skip
    kube.create(stamp(secret, owner=bv, labels={}, owned=True))
    for kind, view in (("instance", iv), ("binding", bv)):
        registry = {"name": f"opbroker-{kind}-registry-{view.meta.uid}", "namespace": "opbroker"}
        kube.create({"apiVersion": "v1", "kind": "Secret", "metadata": registry})
    kube.patch_custom_status(INSTANCES, NS, "db", {"resources": recorded(
        [cm_ref("data"), cm_ref("keep"), cm_ref("foreign")], [cm_ref("keep")])})  # fmt: skip
    kube.patch_custom_status(BINDINGS, NS, "b1", {"resources": recorded([cm_ref("grant")])})
    kube.delete_custom(INSTANCES, NS, "db")
    return kube, instance, binding


def cm(kube: FakeKube, name: str) -> dict[str, Any] | None:
    return kube.object("v1", "ConfigMap", NS, name)


def test_perform_lets_go_records_why_and_drops_only_opbrokers_finalizer() -> None:
    kube, instance, binding = world()
    plan = abandoning.read_instance(kube, NS, "db", with_bindings=True)  # type: ignore[arg-type]
    assert plan.refusal is None
    done = abandoning.perform(kube, plan, reason="the operator is gone", by="alice",  # type: ignore[arg-type]
                              registry_namespace="opbroker")  # fmt: skip
    assert [(o.target.meta.name, o.finalizer) for o in done] == [("b1", "removed"), ("db", "removed")]
    assert kube.custom_object(BINDINGS, NS, "b1") is None  # deleted first, then let go of: gone
    left = kube.custom_object(INSTANCES, NS, "db")
    assert left is not None and left["metadata"]["finalizers"] == [FOREIGN]  # only opbroker's finalizer went
    assert left["metadata"]["annotations"] == {
        ANNOTATION_ABANDONED_REASON: "the operator is gone",
        ANNOTATION_ABANDONED_BY: "alice",
    }
    assert cm(kube, "data") is None and cm(kube, "grant") is None
    assert kube.object("v1", "Secret", NS, "b1-credentials") is None
    kept = cm(kube, "keep")
    assert kept is not None and not kept["metadata"].get("ownerReferences")
    assert ANNOTATION_OWNER_UID not in (kept["metadata"].get("annotations") or {})
    assert LABEL_MANAGED_BY not in (kept["metadata"].get("labels") or {})
    assert cm(kube, "foreign") is not None and not kube.writes(kind="ConfigMap", verb="patch")[1:]
    for kind, body in (("instance", instance), ("binding", binding)):
        name = f"opbroker-{kind}-registry-{body['metadata']['uid']}"
        assert kube.object("v1", "Secret", "opbroker", name) is None
    events = [(e["involvedObject"]["name"], e["reason"], e["type"]) for e in kube.events]
    assert events == [("b1", "Abandoned", "Warning"), ("db", "Abandoned", "Warning")]
    assert "abandoned by alice: the operator is gone" in kube.events[1]["message"]
    # The order of the instance's writes: why first, the finalizer last.
    db_writes = [c.verb for c in kube.calls if c.name == "db" and c.kind == "SFServiceInstance"][-2:]
    assert db_writes == ["event", "patch"]


def test_a_conflict_on_the_finalizer_reads_again_and_never_puts_back_one_removed_meanwhile() -> None:
    kube, _, _ = world()
    plan = abandoning.read_instance(kube, NS, "db", with_bindings=True)  # type: ignore[arg-type]
    real = kube.patch_custom
    raced = []

    def racing(kind: Any, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any] | None:
        if kind is INSTANCES and "finalizers" in patch.get("metadata", {}) and not raced:
            raced.append(True)  # the other controller drops its finalizer between our read and our write
            real(kind, namespace, name, {"metadata": {"finalizers": [FINALIZER]}})
        return real(kind, namespace, name, patch)

    kube.patch_custom = racing  # type: ignore[method-assign]
    done = abandoning.perform(kube, plan, reason="r", by=None, registry_namespace="opbroker")  # type: ignore[arg-type]
    assert raced and done[-1].finalizer == "removed"
    # Written from the stale read, the patch would have put the foreign finalizer back; its 409 made us read again.
    assert kube.custom_object(INSTANCES, NS, "db") is None


def test_a_refused_write_stops_with_the_finalizer_on() -> None:
    kube, _, _ = world()
    plan = abandoning.read_instance(kube, NS, "db", with_bindings=True)  # type: ignore[arg-type]
    real = kube.delete

    def forbidden(ref: ResourceRef, *, resource_version: str | None = None) -> bool:
        if ref.name == "data":
            exc = ApiException(status=403, reason="Forbidden")
            exc.body = json.dumps({"message": 'configmaps "data" is forbidden: User "bob" cannot delete'})
            raise exc
        return real(ref, resource_version=resource_version)

    kube.delete = forbidden  # type: ignore[method-assign]
    with pytest.raises(abandoning.Stopped, match='could not delete ConfigMap team/data: configmaps "data" is forbid'):
        abandoning.perform(kube, plan, reason="r", by=None, registry_namespace="opbroker")  # type: ignore[arg-type]
    left = kube.custom_object(INSTANCES, NS, "db")
    assert left is not None and FINALIZER in left["metadata"]["finalizers"]
    assert kube.custom_object(BINDINGS, NS, "b1") is None  # the binding before it was done


def test_a_shared_singleton_loses_only_our_entry() -> None:
    users = json.dumps([UID, "u-other"])
    live = live_cm("shared", stamped=None, owners=(), annotations={ANNOTATION_SINGLETON_USERS: users})
    step = abandon.object_step(cm_ref("shared"), live, owner_uid=UID, policy=DeletionPolicy.DELETE)
    assert step.fate is Fate.UNOWN


# -- the CLI edge -------------------------------------------------------------------------------------------


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch) -> tuple[FakeKube, Any]:
    from opbroker.cli import abandon as cli_abandon
    from opbroker.cli.main import app

    kube, _, _ = world()
    monkeypatch.setattr(cli_abandon, "kube_for", lambda kubeconfig, context: kube)
    monkeypatch.setattr(abandoning, "who_am_i", lambda _: "alice")
    return kube, app


def test_the_cli_refuses_without_reason_confirmation_or_bindings_and_then_abandons(cli: tuple[FakeKube, Any]) -> None:
    kube, app = cli
    runner = CliRunner()
    base = ["instance", "abandon", "db", "-n", NS]
    assert runner.invoke(app, base).exit_code == 2  # --reason is required
    assert runner.invoke(app, [*base, "--reason", "  "]).exit_code == 2
    bound = runner.invoke(app, [*base, "--reason", "gone", "--yes"])
    assert bound.exit_code == 1 and "still has 1 binding(s): b1" in bound.output
    asked = runner.invoke(app, [*base, "--reason", "gone", "--with-bindings"])
    assert asked.exit_code == 1 and "pass --yes" in asked.output
    assert "ConfigMap team/keep (recorded: orphan): orphan" in asked.output  # shown before refusing
    assert "ConfigMap team/foreign (recorded: delete): leave (not ours" in asked.output
    assert kube.custom_object(BINDINGS, NS, "b1") is not None  # nothing was done
    done = runner.invoke(app, [*base, "--reason", "gone", "--with-bindings", "--yes"])
    assert done.exit_code == 0, done.output
    assert "deleted: Secret team/b1-credentials" in done.output
    assert "orphaned (kept, no longer managed): ConfigMap team/keep" in done.output
    assert "left (not ours): ConfigMap team/foreign" in done.output
    assert "done: 2 abandoned; objects deleted 3" in done.output
    assert "s3cret" not in done.output and "czNjcmV0" not in done.output  # no Secret value, plain or encoded
    again = runner.invoke(app, [*base, "--reason", "gone", "--yes"])
    assert again.exit_code == 1 and "does not carry opbroker's finalizer" in again.output


def test_the_binding_command_refuses_a_binding_not_being_deleted(cli: tuple[FakeKube, Any]) -> None:
    _, app = cli
    result = CliRunner().invoke(app, ["binding", "abandon", "b1", "-n", NS, "--reason", "r", "--yes"])
    assert result.exit_code == 1 and "is not being deleted" in result.output
