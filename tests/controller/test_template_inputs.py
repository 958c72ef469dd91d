"""The one builder of a template's inputs (issue 42): a request's ``context.namespace`` is honoured only where the
instance may direct its objects, for every render path alike (they all call ``template_inputs``)."""

from __future__ import annotations

import pytest

from opbroker.controller.core.template_inputs import template_inputs
from opbroker.controller.core.views import InstanceView


def instance(home: str, context_namespace: str | None) -> InstanceView:
    context = {"namespace": context_namespace} if context_namespace else {}
    return InstanceView.of(
        {"metadata": {"name": "i", "namespace": home, "uid": "u"}, "spec": {"planId": "p", "context": context}}
    )


@pytest.mark.parametrize(
    ("home", "context_namespace", "objects_go_to"),
    [
        ("team-a", None, "team-a"),
        ("team-a", "team-a", "team-a"),
        ("team-a", "team-b", "team-a"),  # a tenant's instance naming another team's namespace: not honoured
        ("opbroker", "team-b", "team-b"),  # recorded by the broker in the control plane's namespace: honoured
    ],
)
def test_the_context_namespace_is_honoured_only_where_the_instance_may_direct_its_objects(
    home: str, context_namespace: str | None, objects_go_to: str
) -> None:
    inputs = template_inputs(
        instance(home, context_namespace), control_plane="opbroker", service=None, plan={}, registry=None
    )
    assert inputs.namespace == objects_go_to
    assert inputs.default_namespace == home
