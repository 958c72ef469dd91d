"""Shards on a local control plane of their own (issue 46): three controllers, each leading its shard's Lease, a broker
that labels what it creates, and a tenant that creates its own objects.

Shown against the real API server (its audit log says which shard wrote what, by the controllers' user agents
``opbroker-controller/shard-<i>``):

* instances and their bindings spread over the shards, each object written by its own shard's controller only;
* a tenant's own instance and binding get their shard from the assigner (shard 0); the tenant can neither choose a
  shard nor move an object to another (the admission policy refuses it: a real ServiceAccount token, admin of its
  namespace), and nothing of another tenant changes;
* a shard's leader killed (SIGKILL): its standby takes the shard's Lease within the lease, and provisions go on;
* the count changed from 3 to 4 and back while provisions are in flight: every object ends where the rule puts it,
  was handled by one shard at a time (its writers in the audit log: one run per shard it passed through), and
  everything deprovisions.
"""

from __future__ import annotations

import collections
import json
import os
import re
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from bench.invariants import Expected, violations
from bench.invariants import snapshot as osb_snapshot
from opbroker.api.conventions import DEFAULT_NAMESPACE
from opbroker.api.shards import SHARD_LABEL, shard_of
from opbroker.devcluster.controlplane import free_ports
from opbroker.devcluster.processes import Process
from tests.cluster_fixtures import onboard
from tests.controller_support import DEMO, OPBROKER, apply_yaml, broker_ready, wait_for
from tests.multicluster_support import Cluster, start_cluster
from tests.tenancy_support import assert_unchanged, make_tenant, refused, snapshot

GROUP, VERSION = "osb.servicefabrik.io", "v1alpha1"
DEMO_GROUP, DEMO_VERSION = "demo.opbroker.io", "v1alpha1"
SERVICE = "6f4e7a0c-2f0a-4d5e-9b1a-0d6c1e0f5a11"
PLAN = "0b9bd3f2-8d55-4a0b-9c1e-55c9a4e3d7a2"
LEASE_SECONDS = 6
AGENT = "opbroker-controller/shard-"

pytestmark = pytest.mark.apiserver


@dataclass
class Sharded:
    """The sharded control plane: its controllers by shard (the leader first), the broker, one tenant namespace."""

    cluster: Cluster
    log_dir: Path
    namespace: str
    count: int = 3
    controllers: dict[int, list[Process]] = field(default_factory=dict)
    metrics_ports: dict[str, int] = field(default_factory=dict)
    """Each controller's ``/metrics`` port, by process name."""
    broker: Process | None = None
    broker_url: str = ""
    auth: tuple[str, str] = ("platform", uuid.uuid4().hex)
    starts: int = 0

    def start_controller(self, shard: int, count: int, *, takeover: bool = False) -> Process:
        """A controller of ``shard`` among ``count``, campaigning for its shard's Lease (a standby if it is held);
        ``takeover``: for every shard's, its own first (``--shard-takeover``)."""
        self.starts += 1
        (port,) = free_ports(1)
        process = self.cluster.start(
            f"controller-{self.starts}-shard-{shard}-of-{count}",
            [
                str(OPBROKER),
                "controller",
                "run",
                "--kubeconfig",
                str(self.cluster.plane.kubeconfig),
                "--shards",
                str(count),
                "--shard",
                str(shard),
                "--lease-seconds",
                str(LEASE_SECONDS),
                "--poll-seconds",
                "2",
                "--metrics-port",
                str(port),
                *(["--shard-takeover"] if takeover else []),
            ],
            self.log_dir,
        )
        self.metrics_ports[process.name] = port
        self.controllers.setdefault(shard, []).append(process)
        return process

    def stop_shard(self, shard: int) -> None:
        """SIGTERM every controller of ``shard`` (a leader releases its Lease as it stops)."""
        for process in self.controllers.pop(shard, []):
            process.stop()
            self.cluster.processes.remove(process)

    def start_broker(self, count: int) -> None:
        """``opbroker broker serve --shards COUNT`` (restarted when running)."""
        if self.broker is not None:
            self.broker.stop()
            self.cluster.processes.remove(self.broker)
        (port,) = free_ports(1)
        username, password = self.auth
        self.starts += 1
        self.broker = self.cluster.start(
            f"broker-{self.starts}-of-{count}",
            [
                str(OPBROKER),
                "broker",
                "serve",
                "--kubeconfig",
                str(self.cluster.plane.kubeconfig),
                "--port",
                str(port),
                "--log-level",
                "warning",
                "--shards",
                str(count),
                "--retry-after",
                "1",
                "--allowed-namespace-selector",
                "opbroker.io/test=true",
            ],
            self.log_dir,
            env={"OPBROKER_BROKER_USERNAME": username, "OPBROKER_BROKER_PASSWORD": password},
        )
        self.broker_url = f"http://127.0.0.1:{port}"
        wait_for(lambda: broker_ready(self.broker_url), 30, "the broker to answer")

    def osb(self) -> httpx.Client:
        headers = {"X-Broker-API-Version": "2.17"}
        return httpx.Client(base_url=self.broker_url, auth=self.auth, headers=headers, timeout=30)

    def lease_holder(self, shard: int) -> str:
        lease = client.CoordinationV1Api(self.cluster.api).read_namespaced_lease(
            f"opbroker-controller-shard-{shard}", DEFAULT_NAMESPACE
        )
        return lease.spec.holder_identity or ""

    def get(self, plural: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        return self.cluster.get(plural, namespace or self.namespace, name)


@pytest.fixture(scope="module")
def sharded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sharded]:
    log_dir = tmp_path_factory.mktemp("shards-logs")
    cluster = start_cluster(f"shards-{os.getpid()}", audit=True)
    try:
        apply_yaml(cluster.api, DEMO / "catalog.yaml", DEFAULT_NAMESPACE)
        cluster.start(
            "demo-operator",
            [sys.executable, str(DEMO / "operator.py"), "--kubeconfig", str(cluster.plane.kubeconfig)],
            log_dir,
        )
        namespace = new_namespace(cluster.api, "shards")
        env = Sharded(cluster, log_dir, namespace)
        for shard in range(env.count):
            env.start_controller(shard, env.count)
        env.start_broker(env.count)
        for shard in range(env.count):
            wait_for(lambda shard=shard: held(env, shard), 60, f"shard {shard} to lead")
        yield env
    finally:
        cluster.stop_processes()
        cluster.plane.down(progress=lambda _message: None)


def held(env: Sharded, shard: int) -> bool:
    try:
        return bool(env.lease_holder(shard))
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise


def new_namespace(api: client.ApiClient, prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    client.CoreV1Api(api).create_namespace({"metadata": {"name": name, "labels": {"opbroker.io/test": "true"}}})
    onboard(api, name)
    return name


# -- OSB ---------------------------------------------------------------------------------------------------------


def provision(osb: httpx.Client, namespace: str, instance: str) -> None:
    body = {
        "service_id": SERVICE,
        "plan_id": PLAN,
        "context": {"platform": "kubernetes", "namespace": namespace},
        "organization_guid": "org",
        "space_guid": "space",
    }
    answer = osb.put(f"/v2/service_instances/{instance}", params={"accepts_incomplete": "true"}, json=body)
    assert answer.status_code == 202, answer.text


def bind(osb: httpx.Client, instance: str, binding: str) -> None:
    body = {"service_id": SERVICE, "plan_id": PLAN}
    url = f"/v2/service_instances/{instance}/service_bindings/{binding}"
    answer = osb.put(url, params={"accepts_incomplete": "true"}, json=body)
    assert answer.status_code in (201, 202), answer.text


def state(env: Sharded, plural: str, name: str, namespace: str | None = None) -> str | None:
    return ((env.get(plural, name, namespace) or {}).get("status") or {}).get("state")


def settle(env: Sharded, plural: str, names: list[str], timeout: float = 120) -> None:
    """Every one of ``names`` reaches ``succeeded`` (a failure fails the test at once, with the shard's logs)."""

    def all_succeeded() -> bool:
        states = {name: state(env, plural, name) for name in names}
        failed = [name for name, st in states.items() if st == "failed"]
        assert not failed, f"{plural} failed: {failed}\n" + logs(env)
        return all(st == "succeeded" for st in states.values())

    wait_for(all_succeeded, timeout, f"{len(names)} {plural} to succeed", interval=0.5)


def deprovision(env: Sharded, osb: httpx.Client, instance: str, bindings: list[str]) -> None:
    params = {"service_id": SERVICE, "plan_id": PLAN, "accepts_incomplete": "true"}
    for binding in bindings:
        answer = osb.delete(f"/v2/service_instances/{instance}/service_bindings/{binding}", params=params)
        assert answer.status_code in (200, 202), answer.text
    for binding in bindings:
        wait_for(lambda b=binding: env.get("sfservicebindings", b) is None, 60, f"binding {binding} to go")
    answer = osb.delete(f"/v2/service_instances/{instance}", params=params)
    assert answer.status_code in (200, 202), answer.text


def label(env: Sharded, plural: str, name: str, namespace: str | None = None) -> str | None:
    labels = ((env.get(plural, name, namespace) or {}).get("metadata") or {}).get("labels") or {}
    found: str | None = labels.get(SHARD_LABEL)
    return found


def logs(env: Sharded) -> str:
    return "\n".join(f"--- {p.name}\n{p.tail(15)}" for processes in env.controllers.values() for p in processes)


# -- the audit log: who wrote what --------------------------------------------------------------------------------

WRITES = {"create", "update", "patch", "delete"}


def controller_writes(env: Sharded, plural: str) -> dict[tuple[str, str], list[int]]:
    """Each object of ``plural``'s successful writes by the sharded controllers, in the order the API server made
    them: the shard of each writer."""
    events: list[tuple[str, tuple[str, str], int]] = []
    with env.cluster.plane.audit_log.open("rb") as handle:
        for line in handle:
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            agent = event.get("userAgent", "")
            ref = event.get("objectRef") or {}
            if (
                event.get("stage") != "ResponseComplete"
                or not agent.startswith(AGENT)
                or ref.get("resource") != plural
                or event.get("verb") not in WRITES
                or not 200 <= (event.get("responseStatus") or {}).get("code", 0) < 300
            ):
                continue
            shard = int(agent[len(AGENT) :].split(" ", 1)[0].split("/", 1)[0])
            events.append((event["stageTimestamp"], (ref.get("namespace", ""), ref.get("name", "")), shard))
    writers: dict[tuple[str, str], list[int]] = collections.defaultdict(list)
    for _at, key, shard in sorted(events):
        writers[key].append(shard)
    return writers


def runs(shards: list[int]) -> list[int]:
    """The shards in the order they wrote, each run of consecutive writes by one shard counted once."""
    return [shard for index, shard in enumerate(shards) if index == 0 or shards[index - 1] != shard]


# -- the tests ---------------------------------------------------------------------------------------------------


def test_objects_spread_over_the_shards_and_each_is_handled_by_its_own(sharded: Sharded) -> None:
    env = sharded
    instances = [f"spread-{n}-{uuid.uuid4().hex[:6]}" for n in range(9)]
    bindings = {instance: f"b-{instance}" for instance in instances}
    with env.osb() as osb:
        for instance in instances:
            provision(osb, env.namespace, instance)
        settle(env, "sfserviceinstances", instances)
        # Every shard watches Secrets (its registries among them) from its start, not shard 0 alone (no plan's
        # template had named a Secret yet): otherwise each new instance's registry was a GET, and a restarted shard
        # read every registry with one.
        for shard, (leader, *_standbys) in env.controllers.items():
            assert secrets_known(env.metrics_ports[leader.name]) > 0, f"shard {shard} watches no Secrets"
        for instance, binding in bindings.items():
            bind(osb, instance, binding)
        settle(env, "sfservicebindings", list(bindings.values()))

    expected = {instance: shard_of(env.namespace, instance, 3) for instance in instances}
    # Each shard holds its own instances and bindings only: memory divides by the count.
    custom = env.cluster.custom
    for shard, (leader, *_standbys) in env.controllers.items():
        selector = f"{SHARD_LABEL}={shard}"
        labelled = {
            plural: len(custom.list_cluster_custom_object(GROUP, VERSION, plural, label_selector=selector)["items"])
            for plural in ("sfserviceinstances", "sfservicebindings")
        }
        assert labelled["sfserviceinstances"] > 0 or shard not in expected.values()
        # Its source watch too: the Databases of its own instances, not every shard's (issue 46's per-shard cost).
        labelled["databases"] = len(
            custom.list_cluster_custom_object(DEMO_GROUP, DEMO_VERSION, "databases", label_selector=selector)["items"]
        )
        port = env.metrics_ports[leader.name]
        wait_for(lambda port=port, labelled=labelled: held_by(port) == labelled, 10, f"shard {shard}'s store")
    assert len(set(expected.values())) >= 2, "nine instances all on one shard: the rule does not spread"
    for instance, binding in bindings.items():
        assert label(env, "sfserviceinstances", instance) == str(expected[instance])
        assert database_label(env, instance) == str(expected[instance])  # its rendered objects carry it too
        assert label(env, "sfservicebindings", binding) == str(expected[instance])  # a binding follows its instance
    # Their registries too (so a restarted shard lists only its own registries' bodies).
    secrets = client.CoreV1Api(env.cluster.api).list_namespaced_secret(
        DEFAULT_NAMESPACE, label_selector=f"opbroker.io/registry-of,opbroker.io/owner-namespace={env.namespace}"
    )
    registries = {s.metadata.labels["opbroker.io/instance"]: s.metadata.labels.get(SHARD_LABEL) for s in secrets.items}
    assert {i: registries.get(i) for i in instances} == {i: str(shard) for i, shard in expected.items()}
    for plural, owner in (
        ("sfserviceinstances", expected),
        ("sfservicebindings", {bindings[i]: expected[i] for i in instances}),
    ):
        writers = controller_writes(env, plural)
        for name, shard in owner.items():
            assert writers[(env.namespace, name)], f"no controller wrote {plural}/{name}"
            assert set(writers[(env.namespace, name)]) == {shard}, (
                f"{plural}/{name} written by {writers[(env.namespace, name)]}"
            )


def test_a_tenants_own_objects_get_their_shard_from_the_assigner_and_it_cannot_choose_or_move_one(
    sharded: Sharded,
) -> None:
    env = sharded
    victim = f"victim-{uuid.uuid4().hex[:6]}"
    with env.osb() as osb:
        provision(osb, env.namespace, victim)
        settle(env, "sfserviceinstances", [victim])
    mine = new_namespace(env.cluster.api, "attacker")
    tenant = make_tenant(env.cluster.api, mine)
    before = snapshot(env.cluster.api, env.namespace)
    instances, bindings = "sfserviceinstances", "sfservicebindings"

    def create(plural: str, body: dict[str, Any]) -> object:
        return tenant.custom.create_namespaced_custom_object(GROUP, VERSION, mine, plural, body)

    def relabel(name: str, value: str | None) -> object:
        forged = {"metadata": {"labels": {SHARD_LABEL: value}}}
        return tenant.custom.patch_namespaced_custom_object(GROUP, VERSION, mine, instances, name, forged)

    # Choosing a shard at creation (the least loaded one, or a victim's) is refused by the API server.
    refused(lambda: create(instances, tenant_instance(f"chosen-{uuid.uuid4().hex[:6]}", {SHARD_LABEL: "1"})))
    # Created without one, its instance and its binding are labelled by shard 0 with the rule's shard, and handled.
    own = f"own-{uuid.uuid4().hex[:6]}"
    create(instances, tenant_instance(own))
    create(bindings, tenant_binding(f"b-{own}", own))
    want = str(shard_of(mine, own, env.count))
    wait_for(lambda: label(env, instances, own, mine) == want, 30, "the assigner to label the instance")
    wait_for(lambda: label(env, bindings, f"b-{own}", mine) == want, 30, "the assigner to label the binding")
    wait_for(lambda: state(env, instances, own, mine) is not None, 60, "its shard to handle it")
    writers = controller_writes(env, instances)[(mine, own)]
    assert set(writers) <= {0, int(want)} and int(want) in writers  # the assigner's label write, then its shard's
    # Moving it to another shard, or taking it off every shard, is refused too.
    refused(lambda: relabel(own, str((int(want) + 1) % env.count)))
    refused(lambda: relabel(own, None))
    assert label(env, instances, own, mine) == want
    # Nothing of the other tenant's namespace changed.
    assert_unchanged(before, snapshot(env.cluster.api, env.namespace))
    tenant.api.close()


def tenant_instance(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """An SFServiceInstance a tenant writes itself (not through the broker)."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "SFServiceInstance",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"instanceId": name, "serviceId": SERVICE, "planId": PLAN, "parameters": {}},
    }


def tenant_binding(name: str, instance: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "SFServiceBinding",
        "metadata": {"name": name},
        "spec": {"id": name, "instanceId": instance, "serviceId": SERVICE, "planId": PLAN},
    }


def test_a_killed_shard_leader_is_taken_over_by_its_standby_within_the_lease(sharded: Sharded) -> None:
    env = sharded
    shard = 1
    leader = env.controllers[shard][0]
    holder = env.lease_holder(shard)
    standby = env.start_controller(shard, env.count)
    wait_for(lambda: "campaigning" in standby.log.read_text(errors="replace"), 30, "the standby to campaign")
    assert env.lease_holder(shard) == holder  # standing by: the leader keeps the Lease

    names = {s: on_shard(env, f"fo{s}", s) for s in (0, shard)}
    # Provisions of the shard in flight as its leader dies: none lost, none done twice.
    in_flight = [on_shard(env, f"fl{n}", shard) for n in range(3)]
    with env.osb() as osb:
        for instance in in_flight:
            provision(osb, env.namespace, instance)
    leader.kill()  # SIGKILL: its Lease is not released
    killed = time.monotonic()
    env.controllers[shard].remove(leader)
    env.cluster.processes.remove(leader)
    with env.osb() as osb:
        provision(osb, env.namespace, names[0])  # another shard is untouched meanwhile
        provision(osb, env.namespace, names[shard])
        settle(env, "sfserviceinstances", [names[0]], timeout=30)
        wait_for(
            lambda: env.lease_holder(shard) not in ("", holder), 3 * LEASE_SECONDS, "the standby to take the Lease"
        )
        takeover = time.monotonic() - killed
        settle(env, "sfserviceinstances", [names[shard], *in_flight], timeout=60)
    taken_over_in_time(env, f"shard {shard} taken over", takeover, live=[names[0], names[shard], *in_flight])
    writers = controller_writes(env, "sfserviceinstances")
    assert set(writers[(env.namespace, names[shard])]) == {shard}
    assert set(writers[(env.namespace, names[0])]) == {0}


def test_a_shard_without_a_standby_of_its_own_is_taken_over_by_a_spare_of_another(sharded: Sharded) -> None:
    """``--shard-takeover``: a spare (here a second replica of shard 0, whose leader keeps its Lease) campaigns for
    every shard's Lease; shard 2's leader killed with no standby of its own, the spare takes shard 2's Lease within
    the lease and runs as shard 2 — its provisions go on, written by shard 2 only (its user agent names the shard
    it took), nothing lost or done twice."""
    env = sharded
    shard = 2
    (leader,) = env.controllers[shard]
    holder = env.lease_holder(shard)
    spare = env.start_controller(0, env.count, takeover=True)
    wait_for(lambda: "campaigning" in spare.log.read_text(errors="replace"), 30, "the spare to campaign")
    assert env.lease_holder(shard) == holder and env.lease_holder(0) != ""  # every Lease held: the spare waits

    in_flight = [on_shard(env, f"sp{n}", shard) for n in range(2)]
    with env.osb() as osb:
        for instance in in_flight:
            provision(osb, env.namespace, instance)
    leader.kill()  # SIGKILL: its Lease is not released, and no standby of shard 2 waits for it
    killed = time.monotonic()
    env.controllers[shard].remove(leader)
    env.cluster.processes.remove(leader)
    env.controllers[0].remove(spare)
    env.controllers[shard].append(spare)  # what it runs as from now on (a later test stops it as shard 2's)
    later = on_shard(env, "spl", shard)
    with env.osb() as osb:
        wait_for(lambda: env.lease_holder(shard) not in ("", holder), 3 * LEASE_SECONDS, "the spare to take the Lease")
        takeover = time.monotonic() - killed
        provision(osb, env.namespace, later)
        settle(env, "sfserviceinstances", [later, *in_flight], timeout=60)
    assert "takes shard 2 over" in spare.log.read_text(errors="replace")
    taken_over_in_time(env, f"shard {shard} taken over by a spare", takeover, live=[later, *in_flight])
    writers = controller_writes(env, "sfserviceinstances")
    assert set(writers[(env.namespace, later)]) == {shard}


def taken_over_in_time(env: Sharded, what: str, takeover: float, *, live: list[str]) -> None:
    """No provision of ``live`` lost or done twice (the bench's invariant checker), and the Lease taken not before the
    dead leader's ran out (it was not released) and then at the taker's next tries: a lease and two retry periods
    (1 s each), plus slack for a loaded machine."""
    expected = Expected(live_instances=set(live), excluded=others(env, live, {}))
    assert violations(expected, osb_snapshot(env.cluster.api, env.namespace), env.namespace) == []
    print(f"{what} {takeover:.1f} s after its leader was killed (lease {LEASE_SECONDS} s)")
    assert takeover <= LEASE_SECONDS + 2 + 3, f"takeover took {takeover:.1f} s"
    assert takeover >= LEASE_SECONDS - 1.5, "the Lease was taken although its leader had renewed it within the lease"


def test_changing_the_count_moves_objects_once_with_provisions_in_flight(sharded: Sharded) -> None:
    env = sharded
    settled = [f"rs-{n}-{uuid.uuid4().hex[:6]}" for n in range(12)]
    with env.osb() as osb:
        for instance in settled:
            provision(osb, env.namespace, instance)
        settle(env, "sfserviceinstances", settled)
        for instance in settled:
            bind(osb, instance, f"b-{instance}")
        settle(env, "sfservicebindings", [f"b-{i}" for i in settled])
        # 3 → 4, as a StatefulSet rolls: the new shard first, then the others from the highest, while the broker
        # (still told 3 for a while) creates more.
        env.start_controller(3, 4)
        in_flight = [f"fl-{n}-{uuid.uuid4().hex[:6]}" for n in range(6)]
        for instance in in_flight[:3]:
            provision(osb, env.namespace, instance)
        for shard in (2, 1, 0):
            env.stop_shard(shard)
            env.start_controller(shard, 4)
    env.start_broker(4)
    with env.osb() as osb:
        for instance in in_flight[3:]:
            provision(osb, env.namespace, instance)
    everything = settled + in_flight
    expect_labels(env, everything, 4)
    settle(env, "sfserviceinstances", everything)
    settle(env, "sfservicebindings", [f"b-{i}" for i in settled])
    moved = [i for i in settled if shard_of(env.namespace, i, 3) != shard_of(env.namespace, i, 4)]
    assert moved and all(shard_of(env.namespace, i, 4) == 3 for i in moved)  # only to the new shard

    # 4 → 3: the removed shard stops (its Lease released), the others restart told 3.
    env.stop_shard(3)
    for shard in (2, 1, 0):
        env.stop_shard(shard)
        env.start_controller(shard, 3)
    env.start_broker(3)
    expect_labels(env, everything, 3)
    settle(env, "sfserviceinstances", everything)

    # One shard at a time: each object's writers change only where it moved (3 → 4 → 3: at most twice).
    for plural, names in (("sfserviceinstances", everything), ("sfservicebindings", [f"b-{i}" for i in settled])):
        writers = controller_writes(env, plural)
        for name in names:
            instance = name.removeprefix("b-")
            path = runs(writers[(env.namespace, name)])
            assert len(path) <= 3, f"{plural}/{name} handled by {path}"
            assert path[-1] in (shard_of(env.namespace, instance, 3), shard_of(env.namespace, instance, 4), 0)

    # Converged, nothing lost, nothing duplicated (the reliability suite's checker): one Database per instance, its
    # users exactly one per binding, finalizers once, every registry and credentials Secret present.
    bindings = {f"b-{i}": i for i in settled}
    live = Expected(live_instances=set(everything), live_bindings=bindings, excluded=others(env, everything, bindings))
    assert violations(live, osb_snapshot(env.cluster.api, env.namespace), env.namespace) == []

    with env.osb() as osb:
        for instance in everything:
            deprovision(env, osb, instance, [f"b-{instance}"] if instance in settled else [])
    for instance in everything:
        wait_for(lambda i=instance: env.get("sfserviceinstances", i) is None, 60, f"{instance} to go")
    gone = Expected(
        gone_instances=set(everything), gone_bindings=set(bindings), excluded=others(env, everything, bindings)
    )
    wait_for(lambda: not violations(gone, osb_snapshot(env.cluster.api, env.namespace), env.namespace), 60, "teardown")


def others(env: Sharded, instances: list[str], bindings: dict[str, str]) -> set[str]:
    """The namespace's instances and bindings of the other tests: left out of this test's checks."""
    found = {
        item["metadata"]["name"]
        for plural in ("sfserviceinstances", "sfservicebindings")
        for item in env.cluster.custom.list_namespaced_custom_object(GROUP, VERSION, env.namespace, plural)["items"]
    }
    return found - set(instances) - set(bindings)


def expect_labels(env: Sharded, names: list[str], count: int) -> None:
    """Every instance of ``names`` (and its binding, when it has one) labelled where the rule puts it for ``count``."""

    def placed() -> bool:
        registries = client.CoreV1Api(env.cluster.api).list_namespaced_secret(
            DEFAULT_NAMESPACE, label_selector=f"opbroker.io/registry-of,opbroker.io/owner-namespace={env.namespace}"
        )
        registry_labels = {
            (s.metadata.labels.get("opbroker.io/binding") or s.metadata.labels["opbroker.io/instance"]): (
                s.metadata.labels.get(SHARD_LABEL)
            )
            for s in registries.items
        }
        for name in names:
            want = str(shard_of(env.namespace, name, count))
            if registry_labels.get(name, want) != want:  # its registry moved along too
                return False
            if label(env, "sfserviceinstances", name) != want:
                return False
            if database_label(env, name) not in (want, None):  # moved along with it (None: not applied yet)
                return False
            binding = env.get("sfservicebindings", f"b-{name}")
            if binding is not None and (binding["metadata"].get("labels") or {}).get(SHARD_LABEL) != want:
                return False
        return True

    wait_for(placed, 90, f"every object labelled for {count} shards", interval=0.5)


def on_shard(env: Sharded, prefix: str, shard: int) -> str:
    """An instance name of ``prefix`` (made unique) that lands on ``shard``."""
    prefix = f"{prefix}-{uuid.uuid4().hex[:4]}"
    return next(f"{prefix}-{n}" for n in range(1000) if shard_of(env.namespace, f"{prefix}-{n}", env.count) == shard)


def held_by(port: int) -> dict[str, int]:
    """The instances, bindings and Databases a controller's store holds (its ``/metrics``)."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    found = {"sfserviceinstances": 0, "sfservicebindings": 0, "databases": 0}
    for labels, value in re.findall(r"^opbroker_store_objects\{([^}]*)\} (\S+)$", text, re.M):
        label = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        if label.get("api_version") == f"{GROUP}/{VERSION}" and label.get("kind") in found:
            found[label["kind"]] += int(float(value))
        if label.get("api_version") == f"{DEMO_GROUP}/{DEMO_VERSION}" and label.get("kind") == "Database":
            found["databases"] += int(float(value))
    return found


def secrets_known(port: int) -> int:
    """The Secrets a controller's store knows of (by metadata at least; its ``/metrics``)."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    found = 0
    for labels, value in re.findall(r"^opbroker_store_objects\{([^}]*)\} (\S+)$", text, re.M):
        if 'kind="Secret"' in labels and 'api_version="v1"' in labels:
            found += int(float(value))
    return found


def database_label(env: Sharded, instance: str) -> str | None:
    """The shard label of ``instance``'s Database (the demo plan names it after the instance; None: none yet)."""
    try:
        found = env.cluster.custom.get_namespaced_custom_object(
            DEMO_GROUP, DEMO_VERSION, env.namespace, "databases", instance
        )
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    value: str | None = (found["metadata"].get("labels") or {}).get(SHARD_LABEL)
    return value
