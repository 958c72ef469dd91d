"""SFCluster kubeconfigs (issue 24 C): a kubeconfig naming a command or a file is refused before any client is
built, the field named, and the SFCluster is not Ready (reason KubeconfigRefused). Table-tested, then through
the SFCluster reconciler on the in-memory fake (nothing is run, nothing is read)."""

from __future__ import annotations

import base64
import types
from pathlib import Path
from typing import Any

import pytest
import yaml

from opbroker.controller.core.reasons import Reason
from opbroker.controller.multicluster.clusters import CLUSTERS, ClusterReconciler, ClusterRegistry
from opbroker.controller.multicluster.core import cluster_plan, kubeconfigs
from opbroker.controller.multicluster.core.cluster_plan import Installation
from opbroker.controller.multicluster.core.ledger import Ledger
from opbroker.controller.multicluster.sisters import KubeconfigError, KubeconfigRefused, client_from_kubeconfig
from opbroker.controller.runtime.clock import FAKE_EPOCH as NOW
from opbroker.controller.runtime.clock import FakeClock
from opbroker.controller.runtime.keys import Key
from opbroker.controller.runtime.runner import Runtime
from opbroker.controller.settings import ControllerSettings
from tests.fake_kube import FakeKube, KindInfo

CA = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n").decode()


def kubeconfig(
    user: dict[str, Any] | None = None, cluster: dict[str, Any] | None = None, **extra: Any
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "c", "cluster": cluster or {"server": "https://10.0.0.1:6443", "certificate-authority-data": CA}}
        ],
        "users": [{"name": "u", "user": user if user is not None else {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "c",
        **extra,
    }


@pytest.mark.parametrize(
    ("config", "refused"),
    [
        (kubeconfig(), []),
        (kubeconfig({"client-certificate-data": CA, "client-key-data": CA}), []),
        (kubeconfig({"username": "a", "password": "b"}), []),
        (kubeconfig({"exec": {"command": "sh", "args": ["-c", "id"]}}), ["users[0].user.exec"]),
        (
            kubeconfig({"auth-provider": {"name": "gcp", "config": {"cmd-path": "/bin/sh"}}}),
            ["users[0].user.auth-provider"],
        ),
        (kubeconfig({"tokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token"}), ["users[0].user.tokenFile"]),
        (
            kubeconfig({"client-certificate": "/etc/a.crt", "client-key": "/etc/a.key"}),
            ["users[0].user.client-certificate", "users[0].user.client-key"],
        ),
        (
            kubeconfig(cluster={"server": "https://x", "certificate-authority": "/etc/ca.crt"}),
            ["clusters[0].cluster.certificate-authority"],
        ),
        (  # beside the -data form that would win: refused all the same
            kubeconfig({"token": "t", "tokenFile": "/etc/shadow"}),
            ["users[0].user.tokenFile"],
        ),
        (  # in an entry the current context does not use: refused too
            {**kubeconfig(), "users": [{"name": "u", "user": {"token": "t"}}, {"name": "v", "user": {"exec": {}}}]},
            ["users[1].user.exec"],
        ),
        (["not", "a", "mapping"], ["the kubeconfig is not a YAML mapping"]),
        ({**kubeconfig(), "users": {"u": {}}}, ["users"]),
        ({**kubeconfig(), "users": [{"name": "u", "user": "exec"}]}, ["users[0].user"]),
    ],
)
def test_refused_fields_are_named(config: Any, refused: list[str]) -> None:
    found = kubeconfigs.problems(config)
    assert [p.split(": ")[0] for p in found] == refused, found


def test_a_refused_kubeconfig_builds_no_client_and_runs_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    config = kubeconfig(
        {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "touch", "args": [str(marker)]}}
    )
    with pytest.raises(KubeconfigRefused) as raised:
        client_from_kubeconfig(yaml.safe_dump(config))
    assert "users[0].user.exec" in str(raised.value)
    assert not marker.exists()
    with pytest.raises(KubeconfigError):
        client_from_kubeconfig("{not: yaml: at all")
    built = client_from_kubeconfig(yaml.safe_dump(kubeconfig()))
    assert built.configuration.host == "https://10.0.0.1:6443"
    built.close()


def test_the_status_names_the_reason() -> None:
    facts = cluster_plan.ClusterFacts(
        "c2",
        cluster_plan.SFClusterView.of({"metadata": {"name": "c2", "generation": 1}}),
        False,
        "the kubeconfig is refused: x",
        None,
        0,
        {},
        None,
        30.0,
        refused=True,
        now=NOW,
    )
    (ready,) = cluster_plan.cluster_status(facts)["conditions"]
    assert (ready["status"], ready["reason"]) == ("False", Reason.KUBECONFIG_REFUSED.value)
    assert ready["message"] == "the kubeconfig is refused: x"


def test_an_sfcluster_with_an_exec_kubeconfig_is_not_ready_and_nothing_ran(tmp_path: Path) -> None:
    kube = FakeKube()
    kube.register_kind(KindInfo(CLUSTERS.api_version, "SFCluster", "sfclusters"))
    marker = tmp_path / "ran"
    config = kubeconfig(
        {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "touch", "args": [str(marker)]}}
    )
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "c2-kubeconfig", "namespace": "opbroker"},
            "data": {"kubeconfig": base64.b64encode(yaml.safe_dump(config).encode()).decode()},
        }
    )
    kube.create(
        {
            "apiVersion": CLUSTERS.api_version,
            "kind": "SFCluster",
            "metadata": {"name": "c2", "namespace": "opbroker"},
            "spec": {"secretRef": "c2-kubeconfig"},
        }
    )
    deps = types.SimpleNamespace(kube=kube, settings=ControllerSettings(multicluster=True), clock=FakeClock())
    reconciler = ClusterReconciler(
        deps, ClusterRegistry(), Ledger(), None, lambda _plan: {}, lambda _key: None, lambda *_: None
    )  # type: ignore[arg-type]
    runtime = Runtime(workers=1)
    runtime.register(reconciler)
    runtime.reconcile_now(Key("cluster", "opbroker", "c2"))
    body = kube.custom_object(CLUSTERS, "opbroker", "c2")
    assert body is not None
    ready = next(c for c in body["status"]["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", Reason.KUBECONFIG_REFUSED.value)
    assert "users[0].user.exec" in ready["message"]
    assert not marker.exists()


def test_a_failed_controller_installation_makes_the_cluster_not_ready_and_says_why() -> None:
    failed = cluster_plan.Installation(
        False, Reason.CONTROLLER_INSTALL_FAILED.value, "the master's kubeconfig may not apply x"
    )
    facts = cluster_plan.ClusterFacts(
        "c2",
        cluster_plan.SFClusterView.of({"metadata": {"name": "c2", "generation": 1}}),
        True,
        "",
        None,
        0,
        {},
        None,
        30.0,
        install=failed,
        now=NOW,
    )
    conditions = {c["type"]: c for c in cluster_plan.cluster_status(facts)["conditions"]}
    assert (conditions["Ready"]["status"], conditions["Ready"]["reason"]) == ("False", "ControllerInstallFailed")
    assert conditions["ControllerInstalled"]["status"] == "False"
    assert "may not apply x" in conditions["Ready"]["message"]
    # Removed: the condition goes, Ready follows reachability again.
    removed = Installation(True, Reason.CONTROLLER_INSTALLED.value, "removed", removed=True)
    body = {"metadata": {"name": "c2", "generation": 1}, "status": {"conditions": list(conditions.values())}}
    facts = cluster_plan.ClusterFacts(
        "c2", cluster_plan.SFClusterView.of(body), True, "", None, 0, {}, None, 30.0, install=removed, now=NOW
    )
    after = {c["type"]: c for c in cluster_plan.cluster_status(facts)["conditions"]}
    assert "ControllerInstalled" not in after and after["Ready"]["status"] == "True"
