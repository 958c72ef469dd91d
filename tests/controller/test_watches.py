"""The declared watches: every subsystem's, each resource once per subsystem, all of them runnable by the
informers (ids unique, metadata-only watches naming their kind, no core-group resource)."""

from __future__ import annotations

from opbroker.controller.runtime.informers import resources_of


def test_the_controller_declares_each_subsystems_watches_once() -> None:
    from kubernetes import client

    from opbroker.controller.app import Controller
    from opbroker.controller.settings import ControllerSettings

    declared = Controller(client.ApiClient(), ControllerSettings(multicluster=True)).all_watches()
    resources = {(w.api_version, w.plural) for w in declared}
    assert len({w.id for w in declared}) == len(declared)
    assert {
        ("osb.servicefabrik.io/v1alpha1", "sfserviceinstances"),
        ("resource.servicefabrik.io/v1alpha1", "sfclusters"),
        ("batch/v1", "jobs"),
        ("servicecatalog.k8s.io/v1alpha1", "instances"),
    } <= resources
    # SFServiceBindings feed two subsystems (the controller's bindings, the claims' registered services)
    assert [w.id for w in declared if w.plural == "sfservicebindings"] == [
        "sfservicebindings",
        "claims-sfservicebindings",
    ]
    resources = resources_of(declared)  # refuses what the informers could not run
    bindings = next(r for r in resources if r.plural == "sfservicebindings")
    assert [w.id for w in bindings.watches] == ["sfservicebindings", "claims-sfservicebindings"]  # one stream
    deployments = next(r for r in resources if r.plural == "deployments")
    assert deployments.kind == "Deployment" and not deployments.metadata_only  # the Service Catalog wants bodies
