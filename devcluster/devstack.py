"""``opbroker dev``: the whole product on this machine — control plane, CRDs, demo operator, controller,
broker and the example catalog — started in order and stopped in reverse.

Everything runs as a child process on 127.0.0.1; logs go to the control plane's folder
(``<cache>/clusters/<name>/logs``). Needs a source checkout: the demo operator and the example catalog
live in ``examples/``.

``in_cluster``: the cluster gets a node, the opbroker image is built locally and imported into it, and the
controller and the broker run as pods from exactly the objects the ``ControlPlane`` component creates
(``opbroker.devcluster.incluster``); the broker is reached through its Service. The demo operator stays a
local process (it stands in for an operator a platform team would install separately).

``kubeconfig``: a cluster the user has instead of the local control plane, which is then neither built nor
started. Controller, broker and demo operator run here as processes against it; whatever the stack creates there
(CRDs, admission policies, the ``opbroker`` namespace, the plan account, the demo namespace's onboarding, the
catalog) is written down first (:mod:`opbroker.devcluster.borrowed`) and deleted by ``down``; what was there
already stays (updated, where the stack applies it). Logs go to ``<cache>/borrowed/<name>/logs``.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from opbroker.api import admission, rbac
from opbroker.api.controllerinstall import namespace_writer
from opbroker.api.conventions import DEFAULT_NAMESPACE
from opbroker.api.crd import all_crds
from opbroker.controller.onboarding import Onboarding
from opbroker.controller.runtime.kube import Kube, describe
from opbroker.devcluster.admission import install_admission
from opbroker.devcluster.binaries import cache_dir
from opbroker.devcluster.borrowed import Borrowed
from opbroker.devcluster.controlplane import ControlPlane, ControlPlaneError, port_is_free
from opbroker.devcluster.crds import install_crds
from opbroker.devcluster.processes import Process

Progress = Callable[[str], None]
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
DEMO_OPERATOR = EXAMPLES / "demo_operator"
#: The namespace the demo's OSB requests name in their context: the dev broker allows it (and only it, besides
#: its own), as a platform's broker allows its tenants' namespaces (``--allowed-namespace``).
DEMO_NAMESPACE = "default"
#: The demo catalog's service (examples/demo_operator/catalog.yaml, SFService spec.name): the demo walks this one
#: by name, never "the catalog's first", because a borrowed cluster may already serve other services.
DEMO_SERVICE = "demo-db"
#: ... and its plan (SFPlan spec.name), named for the same reason: other plans may serve that service there too.
DEMO_PLAN = "small"
#: The admin API's user on the dev broker (its password is new at each start, printed like the broker's).
ADMIN_USERNAME = "operator"


class DevStackError(RuntimeError):
    """Something the user can fix: a port taken, a missing checkout, a process that would not start."""


@dataclass(frozen=True)
class Endpoint:
    url: str
    username: str
    password: str
    kubeconfig: Path
    admin_username: str | None = None
    """The admin API's user (under ``/admin`` on the same port), when the stack serves it."""
    admin_password: str | None = None

    def environment(self) -> dict[str, str]:
        """What ``opbroker dev env`` prints for a shell to export: the names ``opbroker broker serve`` reads too,
        so the walkthroughs' ``curl`` and ``kubectl`` lines work unchanged against any broker."""
        values = {
            "KUBECONFIG": str(self.kubeconfig),
            "OPBROKER_BROKER_URL": self.url,
            "OPBROKER_BROKER_USERNAME": self.username,
            "OPBROKER_BROKER_PASSWORD": self.password,
        }
        if self.admin_username and self.admin_password:
            values |= {"OPBROKER_ADMIN_USERNAME": self.admin_username, "OPBROKER_ADMIN_PASSWORD": self.admin_password}
        return values


def environment_file(name: str) -> Path:
    """Where a running ``opbroker dev --name NAME`` leaves its :meth:`Endpoint.environment` (0600; removed on
    stop): ``opbroker dev env`` reads it from another terminal."""
    return cache_dir() / "dev" / f"{name}.env"


class DevStack:
    def __init__(
        self,
        name: str = "dev",
        *,
        broker_port: int = 8080,
        audit: bool = False,
        controller_args: tuple[str, ...] = (),
        controller_server: str | None = None,
        in_cluster: bool = False,
        node: bool = False,
        controller_replicas: int = 2,
        shards: int = 1,
        allowed_namespace_selector: str | None = None,
        allowed_namespaces: tuple[str, ...] = (),
        kubeconfig: Path | None = None,
    ) -> None:
        self.plane = ControlPlane(name, audit=audit)
        self.existing = kubeconfig
        """A cluster the user has (its kubeconfig): no control plane is built or started; what the stack creates
        there is written down (:class:`Borrowed`) and removed on ``down``."""
        self.borrowed: Borrowed | None = None
        self.allowed_namespace_selector = allowed_namespace_selector
        """Namespaces (by label) the broker accepts in a request's context besides the demo's (the bench's)."""
        self.allowed_namespaces = (DEMO_NAMESPACE, *(n for n in allowed_namespaces if n != DEMO_NAMESPACE))
        """Namespaces (by name) the broker accepts in a request's context: the demo's and ``--allowed-namespace``."""
        self.name = name
        self.in_cluster = in_cluster
        self.node = node or in_cluster
        """The cluster gets a node (pods run) even with the controller and broker as local processes: plans
        whose objects are pods (``examples/postgresql-statefulset``) on the quickest stack to start."""
        self.controller_replicas = controller_replicas
        self.shards = shards
        """Local processes: a controller per shard (``controller-shard-<i>``; one: ``controller``) and the broker
        told the count (issue 46; the sharded bench)."""
        self.controller_args = controller_args
        self.controller_server = controller_server
        """The API server URL the controller talks to (default: the control plane's own). Fault-injection
        runs put a proxy there (bench/reliability.py) to cut the controller's connections."""
        self.broker_port = broker_port
        self.processes: list[Process] = []

    @staticmethod
    def _ensure_gorender(progress: Progress) -> None:
        """Build the Go template renderer before the controller starts (gotemplate and helm plans), so a first
        such render does not wait for a build; the in-cluster stack's image carries it."""
        from opbroker import gorender

        try:
            if gorender.installed_binary() is None and not gorender.cached_binary().is_file():
                progress("building the Go template renderer (gotemplate and helm plans)")
            gorender.renderer_binary()
        except gorender.BuildError as exc:
            raise DevStackError(str(exc)) from exc

    @property
    def kubeconfig(self) -> Path:
        """The kubeconfig of the cluster the stack runs against: the user's, or the local control plane's."""
        return self.existing if self.existing is not None else self.plane.kubeconfig

    @property
    def log_dir(self) -> Path:
        """Where the processes log: the control plane's folder, or (a borrowed cluster) ``<cache>/borrowed/<name>``."""
        if self.existing is not None:
            return cache_dir() / "borrowed" / self.plane.dir.name / "logs"
        return self.plane.log_dir

    def _connect_existing(self, existing: Path, progress: Progress) -> client.ApiClient:
        """The user's cluster, reachable (a version request within 10 s), or a DevStackError saying why."""
        if not existing.is_file():
            raise DevStackError(f"no kubeconfig at {existing}")
        try:
            api: client.ApiClient = config.new_client_from_config(config_file=str(existing))
            version = client.VersionApi(api).get_code(_request_timeout=10)
        except Exception as exc:  # any failure to load or reach it is the user's to fix; say which
            raise DevStackError(f"the cluster of {existing} is not reachable: {exc}") from exc
        progress(f"using the cluster of {existing} (Kubernetes {version.git_version}); building none")
        self.borrowed = Borrowed(api)
        return api

    def up(self, progress: Progress) -> Endpoint:
        if not (DEMO_OPERATOR / "operator.py").exists():
            raise DevStackError(f"the demo operator is not at {DEMO_OPERATOR}: opbroker dev needs a source checkout")
        if self.existing is not None and (self.in_cluster or self.node):
            raise DevStackError("--kubeconfig runs the controller and the broker locally: --in-cluster needs its own")
        if not self.in_cluster and not port_is_free(self.broker_port):
            raise DevStackError(f"port {self.broker_port} on 127.0.0.1 is taken; choose another with --port")
        if self.existing is not None:
            api = self._connect_existing(self.existing, progress)
        else:
            try:
                self.plane.up(node=self.node, progress=progress)
            except ControlPlaneError as exc:
                raise DevStackError(f"the control plane did not start: {exc}") from exc
            api = config.new_client_from_config(config_file=str(self.plane.kubeconfig))
        if self.in_cluster:
            return self._up_in_cluster(api, progress)
        progress("installing opbroker's CRDs, its admission policies and the demo operator's CRD")
        demo_crd = yaml.safe_load((DEMO_OPERATOR / "crd.yaml").read_text())
        self._note([*all_crds(), *(m for _, m in admission.manifests(DEFAULT_NAMESPACE)), demo_crd])
        install_crds(api)
        install_admission(api, DEFAULT_NAMESPACE)
        install_crds(api, [demo_crd])
        self._apply_catalog(api, progress)
        self._ensure_gorender(progress)

        kubeconfig = str(self.kubeconfig)
        password = secrets.token_urlsafe(18)
        admin_password = secrets.token_urlsafe(18)
        log_dir = self.log_dir
        log_dir.mkdir(parents=True, exist_ok=True)
        opbroker = [sys.executable, "-m", "opbroker.cli.main"]
        controller_kubeconfig = str(self._controller_kubeconfig()) if self.controller_server else kubeconfig
        controller = [
            *opbroker,
            "controller",
            "run",
            "--kubeconfig",
            controller_kubeconfig,
            "--no-leader-election",
            "--poll-seconds",
            "5",
            *self.controller_args,
        ]
        controllers = (
            [Process("controller", controller, log_dir)]
            if self.shards == 1
            else [
                Process(
                    f"controller-shard-{i}", [*controller, "--shards", str(self.shards), "--shard", str(i)], log_dir
                )
                for i in range(self.shards)
            ]
        )
        sharded = ["--shards", str(self.shards)] if self.shards > 1 else []
        self.processes = [
            Process(
                "demo-operator",
                [sys.executable, str(DEMO_OPERATOR / "operator.py"), "--kubeconfig", kubeconfig],
                log_dir,
            ),
            *controllers,
            Process(
                "broker",
                [
                    *opbroker,
                    "broker",
                    "serve",
                    "--kubeconfig",
                    kubeconfig,
                    "--port",
                    str(self.broker_port),
                    "--namespace",
                    DEFAULT_NAMESPACE,
                    "--log-level",
                    "warning",
                    *sharded,
                ],
                log_dir,
                # Allowed namespaces through the environment, which a broker from before those options ignores
                # (the bench's before/after compare runs an older tree's broker with this stack).
                env={
                    "OPBROKER_BROKER_USERNAME": "admin",
                    "OPBROKER_BROKER_PASSWORD": password,
                    "OPBROKER_BROKER_ALLOWED_NAMESPACES": " ".join(self.allowed_namespaces),
                    "OPBROKER_ADMIN_USERNAME": ADMIN_USERNAME,
                    "OPBROKER_ADMIN_PASSWORD": admin_password,
                    **(
                        {"OPBROKER_BROKER_ALLOWED_NAMESPACE_SELECTOR": self.allowed_namespace_selector}
                        if self.allowed_namespace_selector
                        else {}
                    ),
                },
            ),
        ]
        for process in self.processes:
            progress(f"starting the {process.name} (log: {process.log})")
            process.start()
        endpoint = Endpoint(
            f"http://127.0.0.1:{self.broker_port}", "admin", password, self.kubeconfig, ADMIN_USERNAME, admin_password
        )
        self._wait_for_broker(endpoint, progress)
        self._write_environment(endpoint)
        return endpoint

    def _write_environment(self, endpoint: Endpoint) -> None:
        """Leave the endpoint for ``opbroker dev env`` (created 0600: it holds the passwords)."""
        path = environment_file(self.name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as file:
            file.write(json.dumps(endpoint.environment(), indent=2))

    def _note(self, manifests: Iterable[Mapping[str, Any]]) -> None:
        """In a borrowed cluster: write down which of ``manifests`` do not exist yet (``down`` removes those)."""
        if self.borrowed is not None:
            self.borrowed.note(manifests)

    def _up_in_cluster(self, api: client.ApiClient, progress: Progress) -> Endpoint:
        from opbroker.components.controlplane import PORT, Names
        from opbroker.devcluster import incluster
        from opbroker.devcluster.images import ImageBuildError, opbroker_image

        try:
            archive, image = opbroker_image(progress)
            self.plane.import_image(archive, image)
        except (ImageBuildError, ControlPlaneError) as exc:
            raise DevStackError(f"the opbroker image: {exc}") from exc
        progress(f"imported {image} into the node")
        password = secrets.token_urlsafe(18)
        args = incluster.dev_control_plane_args(
            image.removeprefix("docker.io/library/"), password, self.controller_replicas
        )
        try:
            manifests = incluster.control_plane_manifests(args)
            incluster.apply_all(api, manifests, progress)
        except incluster.InClusterError as exc:
            raise DevStackError(str(exc)) from exc
        install_crds(api, [yaml.safe_load((DEMO_OPERATOR / "crd.yaml").read_text())])
        self._apply_catalog(api, progress)
        kubeconfig = str(self.plane.kubeconfig)
        self.processes = [
            Process(
                "demo-operator",
                [sys.executable, str(DEMO_OPERATOR / "operator.py"), "--kubeconfig", kubeconfig],
                self.plane.log_dir,
            )
        ]
        self.processes[0].start()
        names = Names(DEFAULT_NAMESPACE)
        try:
            incluster.wait_available(api, DEFAULT_NAMESPACE, [names.controller, names.broker], 180, progress)
        except incluster.InClusterError as exc:
            raise DevStackError(str(exc)) from exc
        url = incluster.broker_service_url(api, DEFAULT_NAMESPACE, names.broker, PORT)
        endpoint = Endpoint(url, "opbroker", password, self.plane.kubeconfig)
        self._wait_for_broker(endpoint, progress)
        self._write_environment(endpoint)
        return endpoint

    def down(self, progress: Progress) -> None:
        environment_file(self.name).unlink(missing_ok=True)
        stuck: list[str] = []
        if self.borrowed is not None:  # the controller releases what it holds while it still runs
            stuck += [describe(ref) for ref in self.borrowed.release_held(progress)]
        for process in reversed(self.processes):
            if process.running:
                progress(f"stopping the {process.name}")
                process.stop()
        self.processes = []
        if self.borrowed is None:
            self.plane.down(progress=progress)
            return
        stuck += [describe(ref) for ref in self.borrowed.release_rest(progress)]
        found = ", ".join(describe(ref) for ref in self.borrowed.found) or "nothing"
        progress(f"left as found in the cluster of {self.existing}: {found}")
        if stuck:
            progress(f"still being deleted (finalizers or the namespace controller): {', '.join(stuck)}")
        self.borrowed = None

    def _controller_kubeconfig(self) -> Path:
        """A copy of the control plane's kubeconfig whose server is ``controller_server``."""
        kubeconfig = yaml.safe_load(self.kubeconfig.read_text())
        for cluster in kubeconfig["clusters"]:
            cluster["cluster"]["server"] = self.controller_server
        path = self.log_dir.parent / "kubeconfig-controller"
        path.write_text(yaml.safe_dump(kubeconfig, sort_keys=False))
        path.chmod(0o600)
        return path

    def _apply_catalog(self, api: client.ApiClient, progress: Progress) -> None:
        from opbroker.devcluster.incluster import DEMO_OPERATOR_RULE

        self._note(
            [
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": DEFAULT_NAMESPACE}},
                *rbac.plan_account_manifests(DEFAULT_NAMESPACE, rbac.plan_account_rules([DEMO_OPERATOR_RULE])),
                namespace_writer(DEFAULT_NAMESPACE),
                *(m for _, m in Onboarding(DEMO_NAMESPACE, DEFAULT_NAMESPACE).objects()),
            ]
        )
        core = client.CoreV1Api(api)
        try:
            core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=DEFAULT_NAMESPACE)))
        except ApiException as exc:
            if exc.status != 409:
                raise
        kube = Kube(api)
        from opbroker.devcluster.grants import grant_plan_account, onboard_namespace

        grant_plan_account(api, DEFAULT_NAMESPACE, [DEMO_OPERATOR_RULE])
        progress(f"granted the plan account {DEFAULT_NAMESPACE}/opbroker-plans the demo operator's Databases")
        onboard_namespace(api, DEMO_NAMESPACE)  # the plan account writes only where it is bound
        progress(f"onboarded the namespace {DEMO_NAMESPACE} as `opbroker namespace onboard {DEMO_NAMESPACE}` does")
        for document in yaml.safe_load_all((DEMO_OPERATOR / "catalog.yaml").read_text()):
            manifest: dict[str, Any] = {
                **document,
                "metadata": {**document["metadata"], "namespace": DEFAULT_NAMESPACE},
            }
            self._note([manifest])
            kube.apply(manifest)
            progress(f"applied {manifest['kind']} {manifest['metadata']['name']} to namespace {DEFAULT_NAMESPACE}")

    def _wait_for_broker(self, endpoint: Endpoint, progress: Progress, timeout: float = 60.0) -> None:
        progress(f"waiting for the broker at {endpoint.url}")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for process in self.processes:
                if not process.running:
                    raise DevStackError(f"the {process.name} exited during start-up; last lines:\n{process.tail()}")
            try:
                if httpx.get(f"{endpoint.url}/readyz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise DevStackError(f"the broker was not ready after {timeout:.0f}s; last lines:\n{self.processes[-1].tail()}")
