"""The admission webhook against a real kube-apiserver (issue 25, item 6), no controller needed: the webhook is
what refuses, and an Instance here carries a test finalizer of its own, so a DELETE the webhook failed to refuse
shows as a ``deletionTimestamp`` instead of a vanished object.

1. Stalled connections — idle ones, and ones stopped mid-handshake — do not let a DELETE of an Instance with
   Bindings through (the first webhook handshook in its accept loop: one idle client made every review time out,
   and ``failurePolicy: Ignore`` let the DELETE through).
2. Replicas share one CA: started at the same moment, two replicas end with the same CA from one Secret, and the
   registered ``caBundle`` verifies each — the API server reaches either.
3. The rights the ControlPlane renders are enough to register the webhook, and no more: as a ServiceAccount
   holding exactly the rendered ClusterRole and Role, the controller's code makes the shared Secret and fills
   in the CA of the configuration the component renders, and cannot patch another configuration or Secret.
4. Every ``opbroker controller run --webhook-port`` replica serves it, a standby too (the CLI's wiring).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import socket
import ssl
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from opbroker.api import webhooks
from opbroker.controller.servicecatalog import webhook
from opbroker.controller.servicecatalog.reviewserver import Limits
from opbroker.devcluster import ControlPlane
from opbroker.devcluster.controlplane import free_ports
from opbroker.devcluster.processes import Process
from tests.controller_support import OPBROKER, wait_for
from tests.loop_support import loop_in_thread
from tests.servicecatalog_support import GROUP, VERSION, custom, get, refused_by_webhook, webhook_serving
from tests.tenancy_support import ensure_service_account, service_account_client

#: A finalizer of the test's own: a DELETE let through marks the Instance instead of removing it.
HOLD = "opbroker.io/test-hold"
#: The start of a TLS ClientHello record (content type 22, TLS 1.0 record version, 512 bytes announced).
HELLO_START = bytes([22, 3, 1, 2, 0, 1, 0, 1, 252, 3, 3])


def held_instance(api_client: client.ApiClient, namespace: str, name: str) -> None:
    custom(api_client).create_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        "instances",
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "Instance",
            "metadata": {"name": name, "finalizers": [HOLD]},
            "spec": {"serviceClassName": "none", "planName": "none"},
        },
    )


def binding(api_client: client.ApiClient, namespace: str, name: str, instance: str) -> None:
    custom(api_client).create_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        "bindings",
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "Binding",
            "metadata": {"name": name},
            "spec": {"instanceRef": {"name": instance}},
        },
    )


@contextlib.contextmanager
def released(api_client: client.ApiClient, namespace: str, name: str) -> Iterator[None]:
    """Drop the test finalizer afterwards, so the namespace can go."""
    try:
        yield
    finally:
        with contextlib.suppress(ApiException):
            custom(api_client).patch_namespaced_custom_object(
                GROUP, VERSION, namespace, "instances", name, {"metadata": {"finalizers": None}}
            )


def test_stalled_connections_to_the_webhook_do_not_let_a_delete_through(
    api_client: client.ApiClient, namespace: str
) -> None:
    # Kept-alive connections are closed after 0.2 s: each review below must be accepted anew, past the stalls.
    configuration = f"opbroker-test-{namespace}"
    limits = Limits(idle_seconds=0.2)
    with (
        webhook_serving(api_client, namespace, limits=limits, name=configuration) as hook,
        released(api_client, namespace, "guarded"),
    ):
        held_instance(api_client, namespace, "guarded")
        binding(api_client, namespace, "user", "guarded")
        wait_for(lambda: hook.refs.referring_to(namespace, "guarded"), 10, "the index to see the binding")
        wait_for(lambda: refused_by_webhook(api_client, namespace, "guarded"), 20, "the registration to take")
        time.sleep(0.5)  # the API server's kept-alive connection is closed by now

        stalled = []
        for index in range(16):
            sock = socket.create_connection(("127.0.0.1", hook.port))
            if index % 2:
                sock.sendall(HELLO_START)  # a handshake begun and never finished
            stalled.append(sock)
        try:
            time.sleep(0.2)  # every stalled connection accepted before the DELETE
            message = refused_by_webhook(api_client, namespace, "guarded", dry_run=False)
            assert message is not None, "the DELETE went through: the webhook did not answer in time"
            assert f"{namespace}/user" in message
            instance = get(api_client, "instances", "guarded", namespace)
            assert instance is not None and "deletionTimestamp" not in instance["metadata"]
            assert hook.server.connections >= len(stalled)  # they were still there, held
        finally:
            for sock in stalled:
                sock.close()


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    """The loop the webhooks serve on (the controller's, in the product)."""
    with loop_in_thread() as running:
        yield running


def test_replicas_share_one_ca_and_the_registered_bundle_verifies_each(
    api_client: client.ApiClient, namespace: str, loop: asyncio.AbstractEventLoop
) -> None:
    configuration = f"opbroker-test-{namespace}"
    start = threading.Barrier(2)
    replicas: list[webhook.Webhook] = []
    failures: list[BaseException] = []

    def replica() -> None:
        start.wait()  # both read "no Secret yet" and race to create it
        try:
            replicas.append(webhook.Webhook(api_client, port=0, hosts=["127.0.0.1"], namespace=namespace))
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=replica) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert failures == [] and len(replicas) == 2
    try:
        for replica_ in replicas:
            replica_.start(loop)
        first, second = replicas
        assert first.ca == second.ca
        secrets = client.CoreV1Api(api_client).list_namespaced_secret(namespace).items
        assert [s.metadata.name for s in secrets if s.type == "kubernetes.io/tls"] == [webhooks.SECRET]

        for serving in replicas:  # the API server reaches either, with the one caBundle registered
            webhook.register_url(api_client, f"https://127.0.0.1:{serving.port}", configuration)(serving.ca)
            registered = webhook.registered_ca(api_client, configuration)
            assert registered == first.ca
            context = ssl.create_default_context(cadata=registered.decode())
            with (
                socket.create_connection(("127.0.0.1", serving.port), timeout=5) as raw,
                context.wrap_socket(raw, server_hostname="127.0.0.1"),
            ):
                pass  # verified against the registered bundle
            name = f"db-{serving.port}"
            held_instance(api_client, namespace, name)
            with released(api_client, namespace, name):
                binding(api_client, namespace, f"app-{serving.port}", name)
                message = wait_for(lambda: refused_by_webhook(api_client, namespace, name), 20, "a refusal")  # noqa: B023
                assert f"{namespace}/app-{serving.port}" in message

        # A replica started later (a restart, a scale-up) serves the same CA.
        later = webhook.Webhook(api_client, port=0, hosts=["127.0.0.1"], namespace=namespace)
        assert later.ca == first.ca
        later.stop()
    finally:
        for replica_ in replicas:
            replica_.stop()
        with contextlib.suppress(ApiException):
            client.AdmissionregistrationV1Api(api_client).delete_validating_webhook_configuration(configuration)


@pytest.fixture
def rendered(namespace: str) -> dict[str, Any]:
    """What the ControlPlane component renders for a control plane in ``namespace`` (under Pulumi's mocks)."""
    from tests.pulumi.test_components_controlplane import CLUSTER_ROLE, ROLE, WEBHOOK_CONFIGURATION, deploy, inputs

    mocks, _ = deploy({"namespace": namespace, "create_namespace": False, "install_crds": False})
    return {
        "cluster_role": inputs(mocks, CLUSTER_ROLE, "opbroker-controller"),
        "role": inputs(mocks, ROLE, "opbroker-controller-webhook"),
        "configuration": inputs(mocks, WEBHOOK_CONFIGURATION, "opbroker-webhook"),
        "flags": inputs(mocks, "kubernetes:apps/v1:Deployment", "opbroker-controller")["spec"]["template"]["spec"][
            "containers"
        ][0]["command"],
    }


def test_the_rights_the_control_plane_renders_are_enough_to_register_the_webhook(
    api_client: client.ApiClient, namespace: str, rendered: dict[str, Any], loop: asyncio.AbstractEventLoop
) -> None:
    rbac_api = client.RbacAuthorizationV1Api(api_client)
    admission = client.AdmissionregistrationV1Api(api_client)
    account = "opbroker-controller"
    subject = {"kind": "ServiceAccount", "name": account, "namespace": namespace}
    cluster_role = rendered["cluster_role"]["metadata"]["name"]
    configuration = rendered["configuration"]["metadata"]["name"]
    other = f"not-opbroker-{uuid.uuid4().hex[:8]}"
    flags = dict(zip(rendered["flags"][7::2], rendered["flags"][8::2], strict=True))
    ensure_service_account(api_client, namespace, account)
    role_ref = {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": cluster_role}
    try:
        rbac_api.create_cluster_role({"metadata": {"name": cluster_role}, "rules": rendered["cluster_role"]["rules"]})
        rbac_api.create_cluster_role_binding(
            {"metadata": {"name": cluster_role}, "roleRef": role_ref, "subjects": [subject]}
        )
        role = rendered["role"]
        role_name = role["metadata"]["name"]
        rbac_api.create_namespaced_role(namespace, {"metadata": {"name": role_name}, "rules": role["rules"]})
        rbac_api.create_namespaced_role_binding(
            namespace,
            {
                "metadata": {"name": role["metadata"]["name"]},
                "roleRef": {**role_ref, "kind": "Role", "name": role["metadata"]["name"]},
                "subjects": [subject],
            },
        )
        admission.create_validating_webhook_configuration(
            {"metadata": {"name": configuration}, "webhooks": rendered["configuration"]["webhooks"]}
        )
        admission.create_validating_webhook_configuration(  # someone else's: out of the controller's reach
            {"metadata": {"name": other}, "webhooks": rendered["configuration"]["webhooks"]}
        )
        controller = service_account_client(api_client, namespace, account)

        # What `opbroker controller run --webhook-service ...` does, with the controller's own token.
        hook = webhook.Webhook(
            controller,
            port=0,
            hosts=webhook.service_hosts(namespace, flags["--webhook-service"]),
            namespace=namespace,
            secret=flags["--webhook-secret"],
            register=lambda ca: webhook.register_ca(controller, flags["--webhook-configuration"], ca),
        )
        try:
            hook.start(loop)
            assert hook.refs.wait_synced(30), "the controller could not list Bindings"
            assert webhook.registered_ca(api_client, configuration) == hook.ca
            stored = client.CoreV1Api(api_client).read_namespaced_secret(flags["--webhook-secret"], namespace)
            assert stored.type == "kubernetes.io/tls"
            # The component's fields stay as rendered: only the CA was added.
            (registered,) = admission.read_validating_webhook_configuration(configuration).webhooks
            assert registered.client_config.service.name == "opbroker-controller-webhook"
            assert registered.failure_policy == "Ignore"
        finally:
            hook.stop()

        # Limited by name: another configuration, another Secret of the namespace, are out of reach.
        with pytest.raises(ApiException) as denied:
            webhook.register_ca(controller, other, hook.ca)
        assert denied.value.status == 403
        client.CoreV1Api(api_client).create_namespaced_secret(namespace, {"metadata": {"name": "someone-elses"}})
        with pytest.raises(ApiException) as denied:
            client.CoreV1Api(controller).replace_namespaced_secret(
                "someone-elses", namespace, {"metadata": {"name": "someone-elses"}, "data": {"x": "eQ=="}}
            )
        assert denied.value.status == 403
        controller.close()
    finally:
        for call in (
            lambda: admission.delete_validating_webhook_configuration(configuration),
            lambda: admission.delete_validating_webhook_configuration(other),
            lambda: rbac_api.delete_cluster_role_binding(cluster_role),
            lambda: rbac_api.delete_cluster_role(cluster_role),
        ):
            with contextlib.suppress(ApiException):
                call()


def test_every_controller_replica_serves_the_webhook_standbys_included(
    api_client: client.ApiClient,
    namespace: str,
    control_plane: ControlPlane,
    tmp_path: Path,
) -> None:
    """Two ``opbroker controller run --webhook-port`` processes that both stay standby (another holder keeps the
    Lease, so neither runs kopf): each serves the webhook with the one CA, and the API server's reviews reach
    them. The CLI's wiring (flags, background start, registration) end to end."""
    configuration = f"opbroker-test-{namespace}"
    leases = client.CoordinationV1Api(api_client)
    leases.create_namespaced_lease(
        namespace,
        {
            "metadata": {"name": "opbroker-controller"},
            "spec": {
                "holderIdentity": "someone-else",
                "leaseDurationSeconds": 3600,
                "renewTime": datetime.datetime.now(datetime.UTC).isoformat().replace("+00:00", "Z"),
            },
        },
    )
    processes = []
    for index, port in enumerate(free_ports(2)):
        command = [
            str(OPBROKER), "controller", "run", "--kubeconfig", str(control_plane.kubeconfig),
            "--namespace", namespace, "--webhook-port", str(port), "--webhook-configuration", configuration,
        ]  # fmt: skip
        processes.append((port, Process(f"controller-{index}", command, tmp_path)))
    try:
        for _, process in processes:
            process.start()
        registered = wait_for(lambda: webhook.registered_ca(api_client, configuration), 60, "a registration")
        for port, process in processes:
            context = ssl.create_default_context(cadata=registered.decode())

            def verified(port: int = port, context: ssl.SSLContext = context) -> bool:
                try:
                    with (
                        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
                        context.wrap_socket(raw, server_hostname="127.0.0.1"),
                    ):
                        return True
                except OSError:
                    return False

            assert wait_for(verified, 60, f"{process.name} to serve with the registered CA"), process.tail()
        held_instance(api_client, namespace, "guarded")
        with released(api_client, namespace, "guarded"):
            binding(api_client, namespace, "user", "guarded")
            message = wait_for(lambda: refused_by_webhook(api_client, namespace, "guarded"), 30, "a refusal")
            assert f"{namespace}/user" in message
    finally:
        for _, process in processes:
            process.stop()
        with contextlib.suppress(ApiException):
            client.AdmissionregistrationV1Api(api_client).delete_validating_webhook_configuration(configuration)
