"""``NamespaceOnboarding`` alone, as a team's program uses it for a namespace created later: the namespace's
``opbroker`` account, its binding to the control plane's namespace writer and the plan accounts' bindings — the
objects ``opbroker namespace onboard`` applies — and its args refused early, by field."""

from typing import Any

import pulumi
import pytest

from opbroker.api.controllerinstall import onboarding_objects
from opbroker.components import InvalidArgsError, NamespaceOnboarding, testing

ROLE_BINDING = "kubernetes:rbac.authorization.k8s.io/v1:RoleBinding"
ACCOUNT = "kubernetes:core/v1:ServiceAccount"


def onboard(args: dict[str, Any]) -> tuple[testing.RecordingMocks, dict[str, Any]]:
    seen: dict[str, Any] = {}

    def program() -> Any:
        onboarding = NamespaceOnboarding("team-a", args)  # type: ignore[arg-type]
        return pulumi.Output.all(onboarding.namespace, onboarding.account).apply(lambda v: seen.update(values=v))

    with testing.mocked() as mocks:
        pulumi.runtime.test(program)()
    return mocks, seen


def test_alone_it_creates_the_objects_the_cli_applies() -> None:
    mocks, seen = onboard(
        {"namespace": "team-a", "control_plane": "platform", "plan_accounts": ["opbroker-plans", "pg-plans"]}
    )
    assert seen["values"] == ["team-a", "opbroker"]
    component = mocks.one("opbroker:index:NamespaceOnboarding", "team-a")
    registered = {(r.type, r.name): r.plain_inputs() for r in mocks.registrations if r.parent == component.urn}
    expected = onboarding_objects("team-a", "platform", ("opbroker-plans", "pg-plans"))
    assert sorted(name for _, name in registered) == sorted(f"team-a-{key}" for key, _ in expected)
    for key, manifest in expected:
        type_ = ACCOUNT if manifest["kind"] == "ServiceAccount" else ROLE_BINDING
        inputs = registered[(type_, f"team-a-{key}")]
        assert inputs["metadata"] == manifest["metadata"]
        if type_ == ROLE_BINDING:
            assert inputs["roleRef"] == manifest["roleRef"] and inputs["subjects"] == manifest["subjects"]
    writer = registered[(ROLE_BINDING, "team-a-writer-binding")]
    assert writer["metadata"]["namespace"] == "team-a"
    assert writer["roleRef"]["name"] == "opbroker:platform:namespace-writer"  # the ControlPlane's ClusterRole
    pg = registered[(ROLE_BINDING, "team-a-plan-pg-plans-binding")]
    assert pg["roleRef"]["name"] == "opbroker:platform:pg-plans"
    assert pg["subjects"] == [{"kind": "ServiceAccount", "name": "pg-plans", "namespace": "platform"}]
    # Not under a ControlPlane: no alias to URNs it never had.
    assert not [alias for r in mocks.registrations for alias in r.aliases if 'parentUrn: "urn:' in alias]


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ({}, "namespace"),
        ({"namespace": "Team_A"}, "namespace"),
        ({"namespace": "team-a", "control_plane": "x" * 64}, "control_plane"),
        ({"namespace": "team-a", "plan_accounts": []}, "plan_accounts"),
        ({"namespace": "team-a", "plan_accounts": ["Bad Name"]}, "plan_accounts[0]"),
        ({"namespace": "team-a", "extra": 1}, "extra"),
    ],
)
def test_bad_args_are_refused_by_field_before_anything_is_registered(args: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidArgsError) as raised:
        onboard(args)
    assert field in [path for path, _ in raised.value.problems]
