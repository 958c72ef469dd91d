"""The rollout preview and the mass update's pure parts, without a server.

Covers: a plan change that alters some instances and not others; generated values stay equal on both
sides (with and without a stored registry); an instance the new plan cannot render is "failing" with the
template's error; live sources reach both renders; the summary; which instances a mass update marks and
why not the others; pacing without bursts.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from opbroker.api.catalog import SFPlan
from opbroker.api.meta import ResourceRef
from opbroker.controller.catalog import rollouts
from opbroker.controller.catalog.core.rollout_views import RolloutInstance
from opbroker.controller.catalog.rollouts import Change, Pacer, Skip, Subject
from opbroker.controller.runtime import policies
from opbroker.controller.runtime.clock import FakeClock
from opbroker.rendering import Renderer
from opbroker.rendering.output import RenderedObject

PLAN = """
apiVersion: osb.servicefabrik.io/v1alpha1
kind: SFPlan
metadata: {{name: p, namespace: opbroker}}
spec:
  name: p
  id: p
  serviceId: s
  description: d
  templates:
  - action: sources
    type: jinja2
    content: |
      settings: {{apiVersion: v1, kind: ConfigMap, name: "{{{{ instance.metadata.name }}}}-settings"}}
  - action: provision
    type: jinja2
    content: |
      apiVersion: demo.opbroker.io/v1alpha1
      kind: Database
      metadata:
        name: {{{{ instance.metadata.name }}}}
      spec:
        version: "{{{{ parameter('/version', '16') }}}}"
        password: {{{{ generatePassword('admin', 16) }}}}
        tuning: {{{{ settings.data.tuning | default('none') }}}}
{extra}
"""
# The new plan sizes 14s differently and needs a parameter that "db-c" lacks.
EXTRA = """        storageGB: {{ 5 if parameter('/version') == '14' else 1 }}
        owner: {{ required(parameter('/owner', '') if parameter('/version') == '15' else 'ops',
                           'an owner parameter') }}"""


def plan(extra: str = "") -> tuple[SFPlan, dict[str, Any]]:
    body = yaml.safe_load(PLAN.format(extra=extra))
    return SFPlan.model_validate(body), body


def instance(name: str, **parameters: str) -> dict[str, Any]:
    return {
        "apiVersion": "osb.servicefabrik.io/v1alpha1",
        "kind": "SFServiceInstance",
        "metadata": {"name": name, "namespace": "team-a", "uid": f"uid-{name}"},
        "spec": {"instanceId": name, "planId": "p", "serviceId": "s", "parameters": parameters},
        "status": {"state": "succeeded"},
    }


def fetch(refs: dict[str, ResourceRef]) -> dict[str, dict[str, Any] | None]:
    live = {"db-a-settings": {"apiVersion": "v1", "kind": "ConfigMap", "data": {"tuning": "fast"}}}
    return {name: live.get(ref.name) for name, ref in refs.items()}


def subject(name: str, registry: dict[str, Any] | None = None, **parameters: str) -> Subject:
    return Subject(RolloutInstance.of(instance(name, **parameters)), registry, fetch)


#: The control plane's namespace the previews are made for (the instances live elsewhere).
CONTROL_PLANE = "opbroker"

BASELINE = {"version": "16"}


def run(subjects: list[Subject]) -> list[rollouts.InstanceDiff]:
    renderer = Renderer()
    return [
        rollouts.preview(renderer, s, current=plan(), proposed=plan(EXTRA), control_plane=CONTROL_PLANE)
        for s in subjects
    ]


def test_a_change_that_alters_some_instances_and_not_others() -> None:
    diffs = run(
        [
            subject("db-a", version="14"),
            subject("db-b", {"admin": "stored-password"}, version="16"),
            subject("db-c", version="15"),
        ]
    )
    by_name = {d.name: d for d in diffs}
    changed = by_name["db-a"]
    assert changed.change is Change.CHANGED
    assert "+  storageGB: 5\n" in changed.diff and "+  owner: ops\n" in changed.diff
    assert changed.diff.startswith("--- team-a/db-a (current plan)\n+++ team-a/db-a (new plan)\n")
    assert "password" not in "".join(
        line for line in changed.diff.splitlines() if line[:1] in "+-" and "---" not in line
    ), "a generated password is the same on both sides"
    assert "tuning: fast" in changed.diff, "live sources reach the renders"
    assert by_name["db-b"].change is Change.CHANGED  # storageGB 1 and owner ops are new for it too
    failing = by_name["db-c"]
    assert failing.change is Change.FAILING
    assert failing.error is not None and "an owner parameter" in failing.error
    assert str(rollouts.summarize(diffs)) == "3 instance(s): 2 changed, 0 unchanged, 1 failing to render"


def test_an_irrelevant_change_leaves_instances_unchanged() -> None:
    current = plan()
    body = yaml.safe_load(PLAN.format(extra=""))
    body["spec"]["description"] = "only the description changed"
    proposed = (SFPlan.model_validate(body), body)
    result = rollouts.preview(
        Renderer(), subject("db-a", version="14"), current=current, proposed=proposed, control_plane=CONTROL_PLANE
    )
    assert result.change is Change.UNCHANGED and result.diff == ""


def test_stored_registry_values_are_used_on_both_sides() -> None:
    current, proposed = plan(), plan(EXTRA)
    result = rollouts.preview(
        Renderer(),
        subject("db-b", {"admin": "stored-password"}, version="16"),
        current=current,
        proposed=proposed,
        control_plane=CONTROL_PLANE,
    )
    assert " password: stored-password" in result.diff  # context line, unchanged


def test_an_instance_whose_inputs_could_not_be_read_is_reported() -> None:
    broken = Subject(
        RolloutInstance.of(instance("db-x")), None, fetch, problem="cannot read from cluster 'sister': refused"
    )
    result = rollouts.preview(Renderer(), broken, current=plan(), proposed=plan(EXTRA), control_plane=CONTROL_PLANE)
    assert (result.change, result.error) == (Change.FAILING, "cannot read from cluster 'sister': refused")


def test_a_source_the_acting_user_may_not_read_makes_that_instance_failing_not_the_preview() -> None:
    from kubernetes.client.exceptions import ApiException

    def refused(refs: dict[str, ResourceRef]) -> dict[str, dict[str, Any] | None]:
        raise ApiException(status=403, reason="Forbidden")

    subject = Subject(RolloutInstance.of(instance("db-y")), None, refused)
    result = rollouts.preview(Renderer(), subject, current=plan(), proposed=plan(EXTRA), control_plane=CONTROL_PLANE)
    assert (result.change, result.error) == (Change.FAILING, "cannot read its sources: 403 Forbidden")


# -- mass update -------------------------------------------------------------------------------------------


def with_status(name: str, **fields: Any) -> dict[str, Any]:
    found = instance(name)
    found["metadata"]["resourceVersion"] = "1"
    found["status"] = fields
    return found


def test_verdict_marks_settled_instances_of_the_plan_only() -> None:
    def verdict(item: dict[str, Any], only_outdated: bool = False, marked: set[tuple[str, str]] | None = None) -> Any:
        return rollouts.verdict(
            RolloutInstance.of(item), plan_id="p", plan_hash="h2", only_outdated=only_outdated, marked=marked or set()
        )

    assert verdict(with_status("a", state="succeeded", appliedPlanHash="h1")) is None
    assert verdict(with_status("a", state="failed")) is None
    other = with_status("a", state="succeeded")
    other["spec"]["planId"] = "q"
    assert verdict(other) is Skip.OTHER_PLAN
    deleting = with_status("a", state="succeeded")
    deleting["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    assert verdict(deleting) is Skip.DELETING
    for busy in ("in_queue", "update", "in progress", "delete", None):
        assert verdict(with_status("a", state=busy)) is Skip.BUSY
    assert verdict(with_status("a", state="succeeded", appliedPlanHash="h2"), only_outdated=True) is Skip.CURRENT
    assert verdict(with_status("a", state="succeeded", appliedPlanHash="h2")) is None
    assert verdict(with_status("a", state="succeeded"), marked={("team-a", "a")}) is Skip.MARKED


def test_pacer_spaces_writes_evenly() -> None:
    now = [100.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(round(seconds, 6))
        now[0] += seconds

    pacer = Pacer(4.0, clock=lambda: now[0], sleep=sleep)
    for _ in range(5):
        pacer.wait()
    assert slept == [0.25, 0.25, 0.25, 0.25]
    now[0] += 10  # idle time is not saved up for a burst
    pacer.wait()
    pacer.wait()
    assert slept[-1] == 0.25 and len(slept) == 5


class _Instances:
    """Stands in for the controller's Kube in :func:`rollouts._settle`: every instance is busy, except ``done``
    from the ``done_at``-th read on."""

    def __init__(self, done_at: int) -> None:
        self.done_at = done_at
        self.reads = 0

    def get_custom(self, _kind: object, namespace: str, name: str) -> dict[str, Any]:
        self.reads += 1
        state = "succeeded" if name == "done" and self.reads >= self.done_at else "in progress"
        return {"metadata": {"name": name, "namespace": namespace}, "status": {"state": state}}


def test_settling_waits_on_the_clock_it_is_given_up_to_its_deadline() -> None:
    """The settling's polls wait on the rollout's clock (a fake one here: no real second passes), and an
    instance still busy at the deadline is reported unsettled."""
    clock = FakeClock()
    start = clock.monotonic()
    waiting = rollouts._settle(
        _Instances(done_at=3),  # type: ignore[arg-type]
        [("team-a", "done"), ("team-a", "stuck")],
        timeout=3.0,
        every=policies.every(0.5),
        clock=clock,
    )
    assert waiting == [("team-a", "stuck")]
    assert clock.monotonic() - start == 3.0  # six polls 0.5 s apart, on the fake clock


# -- gotemplate plans -----------------------------------------------------------------------------------------------


def _zalando(path: str, **context: Any) -> tuple[SFPlan, dict[str, Any]]:
    from pathlib import Path

    body = yaml.safe_load((Path(__file__).resolve().parents[2] / path).read_text())
    body["spec"]["context"].update(context)
    return SFPlan.model_validate(body), body


@pytest.mark.process
def test_a_gotemplate_plan_diffs_like_a_jinja2_one() -> None:
    seed = "tests/data/seeds/sfplan-postgresql-zalando.yaml"
    port = "examples/catalog/postgresql-zalando-plan.yaml"
    renderer = Renderer()
    moved = rollouts.preview(
        renderer, subject("db-a"), current=_zalando(port), proposed=_zalando(seed), control_plane=CONTROL_PLANE
    )
    assert moved.change is Change.UNCHANGED, "the jinja2 port and the seed's gotemplate plan render the same"
    bigger = rollouts.preview(
        renderer,
        subject("db-a"),
        current=_zalando(seed),
        proposed=_zalando(seed, diskGB=40),
        control_plane=CONTROL_PLANE,
    )
    assert bigger.change is Change.CHANGED
    assert "-    size: 20Gi\n+    size: 40Gi\n" in bigger.diff
    renderer.go.close()


def test_a_secrets_values_never_appear_in_a_diff_but_their_change_does() -> None:
    """Generated passwords and keys live in Secrets a plan renders; a preview's answer is stored in a ConfigMap
    (issue 42): the diff shows a digest of each value, so a change is visible and the value is not."""
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "s", "namespace": "n"},
        "stringData": {"password": "the-stored-password"},
        "data": {"key": "c2VjcmV0"},
    }
    changed = {**secret, "stringData": {"password": "another-password"}}
    before = rollouts.manifests_text([RenderedObject(manifest=secret)])
    after = rollouts.manifests_text([RenderedObject(manifest=changed)])
    diff = rollouts.unified(before, after, "n/i")
    for value in ("the-stored-password", "another-password", "c2VjcmV0"):
        assert value not in before + after + diff
    assert "-  password: (redacted, sha256 " in diff and "+  password: (redacted, sha256 " in diff
    assert "key: (redacted, sha256 " in before and "key:" not in diff  # unchanged: no line in the diff
    config = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"k": "shown"}}
    assert "shown" in rollouts.manifests_text([RenderedObject(manifest=config)])
