"""A sister cluster made ready for the master (``opbroker sister prepare``): what docs/multicluster.md once listed
as steps by hand, in one idempotent run.

On the sister (its kubeconfig): the control-plane namespace and opbroker's CRDs (the master's installer's own
prerequisites, :func:`opbroker.controller.multicluster.installer.prerequisites`), further CRDs the plans' operator
needs (``crds``: the demo operator's, say), the plan account with the rights the master's plans need there
(computed from what they render, :mod:`opbroker.controller.osb.planaccounts`, resolved by the sister's discovery;
added to what it holds), and the namespaces to onboard there (created when missing). On the master: the Secret
the SFCluster's ``secretRef`` names, holding the sister's kubeconfig reduced to one context of data only
(:func:`opbroker.controller.multicluster.core.kubeconfigs.data_only`: what the master's controller accepts).
Everything is server-side applied; run again, it changes nothing (or what changed: a new plan, a new kubeconfig).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import yaml

from opbroker.api.conventions import DEFAULT_PLAN_SERVICE_ACCOUNT
from opbroker.api.meta import ResourceRef
from opbroker.api.planrights import PlanRights
from opbroker.controller import onboarding
from opbroker.controller.multicluster import installer
from opbroker.controller.osb import planaccounts
from opbroker.controller.runtime.clock import SYSTEM, Clock
from opbroker.controller.runtime.kube import Kube, describe, ref_of
from opbroker.kubeclient.wire import JsonBody, JsonObject, objects_of, path_of

#: The field manager of what the preparation applies (either cluster).
FIELD_MANAGER = "opbroker-sister-prepare"
KUBECONFIG_KEY = "kubeconfig"

Progress = Callable[[str], None]


def secret_name(cluster: str) -> str:
    """The kubeconfig Secret's name for the SFCluster ``cluster`` (its ``secretRef``)."""
    return f"{cluster}-kubeconfig"


@dataclass(frozen=True)
class Preparation:
    """What to prepare: the SFCluster's name, the control-plane namespace (the same on both sides), the sister's
    data-only kubeconfig (YAML), further CRDs, namespaces to onboard in the sister, the plans' parameters."""

    cluster: str
    namespace: str
    kubeconfig: str = field(repr=False)
    crds: tuple[JsonObject, ...] = ()
    onboard: tuple[str, ...] = ()
    account: str = DEFAULT_PLAN_SERVICE_ACCOUNT
    parameters: JsonObject = field(default_factory=dict)

    def secret(self) -> JsonBody:
        """The master's Secret the SFCluster points at (type Opaque, key ``kubeconfig``)."""
        return {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": secret_name(self.cluster),
                "namespace": self.namespace,
                "labels": {"app.kubernetes.io/managed-by": FIELD_MANAGER},
            },
            "type": "Opaque",
            "stringData": {KUBECONFIG_KEY: self.kubeconfig},
        }

    def sfcluster(self) -> JsonBody:
        """The smallest SFCluster for it (what the walkthrough applies, with labels and capacity added)."""
        return {
            "apiVersion": "resource.servicefabrik.io/v1alpha1",
            "kind": "SFCluster",
            "metadata": {"name": self.cluster, "namespace": self.namespace},
            "spec": {"secretRef": secret_name(self.cluster)},
        }


@dataclass(frozen=True)
class Prepared:
    sister: tuple[ResourceRef, ...]
    master: tuple[ResourceRef, ...]
    rights: PlanRights
    plans: tuple[str, ...]


def _await_established(kube: Kube, crds: list[JsonObject], clock: Clock, seconds: float = 15.0) -> None:
    """Until the API server serves ``crds`` (their ``Established`` condition), so discovery resolves their kinds;
    after ``seconds`` (on ``clock``) the kinds are guessed, and said so."""
    deadline = clock.monotonic() + seconds
    for crd in crds:
        while clock.monotonic() < deadline:
            live = kube.get(ref_of(crd), fresh=True)
            conditions = objects_of(path_of(live, "status", "conditions"))
            if any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions):
                break
            clock.block(0.2)


def prepare(
    master: Kube, sister: Kube, wanted: Preparation, progress: Progress = lambda _: None, clock: Clock = SYSTEM
) -> Prepared:
    """Apply everything (sister first: the Secret is what makes the master reach it); the refs applied. ``clock``:
    what the wait for the CRDs reads (the real one by default)."""
    on_sister: list[ResourceRef] = []
    for manifest in [*installer.prerequisites(wanted.namespace), *wanted.crds]:
        sister.apply(dict(manifest), field_manager=FIELD_MANAGER)
        on_sister.append(ref_of(manifest))
    progress(f"sister: namespace {wanted.namespace} and {len(on_sister) - 1} CRDs applied")
    _await_established(sister, [m for m in wanted.crds if m.get("kind") == "CustomResourceDefinition"], clock)
    plans = planaccounts.plans_in_cluster(master, wanted.namespace, wanted.account, progress)
    needed = planaccounts.rights_of(plans, wanted.namespace, wanted.parameters, planaccounts.discovering(sister))
    for guessed in needed.guesses:
        progress(f"sister: {guessed} (the sister does not serve it: pass its CRD with --crd)")
    granted = planaccounts.grant(sister, wanted.namespace, wanted.account, needed, field_manager=FIELD_MANAGER)
    on_sister += granted
    names = ", ".join(p.metadata.name or "?" for p, _ in plans) or "none yet"
    progress(
        f"sister: plan account {wanted.namespace}/{wanted.account} granted what the master's plans render ({names})"
    )
    for namespace in wanted.onboard:
        sister.create_namespace(namespace)
        on_sister += onboarding.onboard(sister, onboarding.Onboarding(namespace, wanted.namespace, (wanted.account,)))
        progress(f"sister: namespace {namespace} onboarded")
    secret = wanted.secret()
    master.apply_secret(secret)
    progress(f"master: {describe(ref_of(secret))} holds the sister's kubeconfig (key {KUBECONFIG_KEY})")
    return Prepared(tuple(on_sister), (ref_of(secret),), needed, tuple(p.metadata.name or "?" for p, _ in plans))


def kubeconfig_text(data_only: JsonObject) -> str:
    return yaml.safe_dump(dict(data_only), sort_keys=False)
