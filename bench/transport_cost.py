"""The client cost of the controller's hot calls, per transport (issue 45: the project's own or a maintained one).

Starts a local control plane (``devcluster.ControlPlane``) with opbroker's CRDs, makes ``--objects`` SFServiceBindings
in one namespace, and times, on each client in turn (rounds alternate the order, so drift is shared), the calls a
provisioned instance costs the controller most of:

* ``get``: one object by name (a reconcile's read past the store);
* ``status``: a merge patch of its ``status`` subresource (every reconcile's write);
* ``list``: the namespace's objects in one page (a listing, ``--objects`` items).

Measured per call: the CPU seconds of this process (``time.process_time``: what the controller pays) and the
wall time, and the API server's CPU over the same calls (from ``/proc``: a change to how requests are sent may
save the server work too).
Clients:

* ``opbroker``: :class:`~opbroker.kubeclient.lean.LeanCustomObjects` over the project's transport (this tree);
* ``lightkube``: ``lightkube.Client`` with generic resources (``--lightkube-path``: where lightkube and its
  dependencies are installed, e.g. ``pip install --target``; it is not one of opbroker's dependencies);
* ``generated``: the official client's ``CustomObjectsApi`` (the reference the lean requests replaced).

Run under the machine's cluster lock: ``flock /tmp/cluster.lock python -m bench.transport_cost``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes import client, config

from bench.common import machine, pid_usage
from opbroker.devcluster import ControlPlane
from opbroker.devcluster.crds import install_crds
from opbroker.kubeclient import deadlines
from opbroker.kubeclient.lean import LeanCustomObjects

GROUP, VERSION, PLURAL, KIND = "osb.servicefabrik.io", "v1alpha1", "sfservicebindings", "SFServiceBinding"
Call = Callable[[int], Any]


def binding(namespace: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"instanceId": "i-1", "serviceId": "s", "planId": "p", "id": name},
    }


def opbroker_calls(kubeconfig: Path, namespace: str, names: list[str]) -> dict[str, Call]:
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    return custom_object_calls(LeanCustomObjects(deadlines.bounded(configuration)), namespace, names)


def generated_calls(kubeconfig: Path, namespace: str, names: list[str]) -> dict[str, Call]:
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    return custom_object_calls(client.CustomObjectsApi(deadlines.bounded(configuration)), namespace, names)


def custom_object_calls(api: Any, namespace: str, names: list[str]) -> dict[str, Call]:
    """The measured calls on a ``CustomObjectsApi`` or the lean client that has its methods (same names and
    arguments): the difference measured is the client's, nothing else."""
    return {
        "get": lambda n: api.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, names[n % len(names)]),
        "status": lambda n: api.patch_namespaced_custom_object_status(
            GROUP, VERSION, namespace, PLURAL, names[n % len(names)], {"status": {"observedGeneration": n}}
        ),
        "list": lambda n: api.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)["items"],
    }


def lightkube_calls(kubeconfig: Path, namespace: str, names: list[str]) -> dict[str, Call]:
    from lightkube import Client, KubeConfig  # type: ignore[import-not-found]
    from lightkube.generic_resource import create_namespaced_resource  # type: ignore[import-not-found]
    from lightkube.types import PatchType  # type: ignore[import-not-found]

    kube = Client(config=KubeConfig.from_file(str(kubeconfig)), field_manager="bench")
    resource = create_namespaced_resource(GROUP, VERSION, KIND, PLURAL)
    return {
        "get": lambda n: kube.get(resource, names[n % len(names)], namespace=namespace),
        "status": lambda n: kube.patch(
            resource.Status,
            names[n % len(names)],
            {"status": {"observedGeneration": n}},
            namespace=namespace,
            patch_type=PatchType.MERGE,
        ),
        "list": lambda n: list(kube.list(resource, namespace=namespace)),
    }


def timed(call: Call, calls: int, start: int, server: int | None = None) -> tuple[float, float, float]:
    """(CPU s, wall s, the API server's CPU s — process ``server``, 0 without) of ``calls`` calls."""
    served = pid_usage(server)["cpu_seconds"] if server else 0.0
    cpu, wall = time.process_time(), time.perf_counter()
    for n in range(start, start + calls):
        call(n)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return cpu, wall, (pid_usage(server)["cpu_seconds"] - served if server else 0.0)


def run(calls: int, objects: int, rounds: int, lightkube_path: str | None) -> dict[str, Any]:
    plane = ControlPlane(f"bench-transport-{uuid.uuid4().hex[:6]}")
    plane.up(progress=lambda message: print(f"  [plane] {message}", flush=True))
    try:
        api = config.new_client_from_config(config_file=str(plane.kubeconfig))
        install_crds(api)
        namespace = "transport-cost"
        client.CoreV1Api(api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
        seed = LeanCustomObjects(api)
        names = [f"b-{n:04d}" for n in range(objects)]
        for name in names:
            seed.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, binding(namespace, name))
        state = plane.state()
        server = state.pids["kube-apiserver"] if state is not None else None
        clients: dict[str, dict[str, Call]] = {
            "opbroker": opbroker_calls(plane.kubeconfig, namespace, names),
            "generated": generated_calls(plane.kubeconfig, namespace, names),
        }
        if lightkube_path:
            sys.path.append(lightkube_path)  # after the virtualenv: its packages win where both have one
            clients["lightkube"] = lightkube_calls(plane.kubeconfig, namespace, names)
        per_list = max(1, calls // 10)  # a listing is 10x to 100x a get: fewer of them
        sizes = {"get": calls, "status": calls, "list": per_list}
        for ops in clients.values():  # warm up: connections, TLS, first-call imports
            for call in ops.values():
                timed(call, 5, 0)
        samples: dict[str, dict[str, list[tuple[float, float, float]]]] = {
            name: {op: [] for op in sizes} for name in clients
        }
        order = list(clients)
        for round_ in range(rounds):
            for name in order if round_ % 2 == 0 else reversed(order):
                for op, size in sizes.items():
                    cpu, wall, served = timed(clients[name][op], size, round_ * size, server)
                    samples[name][op].append((cpu / size, wall / size, served / size))
        results: dict[str, Any] = {}
        for name, ops in samples.items():
            results[name] = {
                op: {
                    "cpu_us_per_call": round(statistics.median(c for c, _, _ in runs) * 1e6, 1),
                    "wall_us_per_call": round(statistics.median(w for _, w, _ in runs) * 1e6, 1),
                    "apiserver_cpu_us_per_call": round(statistics.median(a for _, _, a in runs) * 1e6, 1),
                    "cpu_us_per_round": [round(c * 1e6, 1) for c, _, _ in runs],
                }
                for op, runs in ops.items()
            }
        return {
            "machine": machine(),
            "calls": sizes,
            "objects": objects,
            "rounds": rounds,
            "clients": results,
        }
    finally:
        plane.down(progress=lambda message: print(f"  [plane] {message}", flush=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000, help="gets and status patches per client and round")
    parser.add_argument("--objects", type=int, default=100, help="objects made (and listed by each list call)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--lightkube-path", help="a folder holding lightkube 1.x and its dependencies")
    parser.add_argument("--out", type=Path, help="write the results here (JSON)")
    args = parser.parse_args()
    results = run(args.calls, args.objects, args.rounds, args.lightkube_path)
    text = json.dumps(results, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
