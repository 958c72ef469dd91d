"""The local cluster itself: what its builds cost, how fast it starts (with and without a node), what its
processes weigh, how long a pod takes to run, and how large the opbroker image is.

Cold build times come from the builds' own records (``build.sh`` writes ``build-<time>.json`` beside the binaries
the first time it builds them on a machine; a cached binary is never rebuilt, so a bench run cannot time
it without throwing the cache away). The opbroker image is rebuilt here, bypassing its cache.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from kubernetes import client, config

from opbroker.devcluster import ControlPlane
from opbroker.devcluster.binaries import KUBE_VERSION, find_node_binaries, kube_bin_dir
from opbroker.devcluster.images import opbroker_image, opbroker_image_name

POD_TIMEOUT = 120.0


#: Seconds a started cluster runs before its memory is read (its controllers fill their caches first).
SETTLE_SECONDS = 10.0


def _processes(plane: ControlPlane) -> dict[str, float | None]:
    time.sleep(SETTLE_SECONDS)
    return {c.name: c.rss_mib for c in plane.status().components}


def _start(name: str, *, node: bool) -> tuple[ControlPlane, float]:
    plane = ControlPlane(name)
    started = time.monotonic()
    plane.up(node=node, progress=lambda _m: None)
    return plane, round(time.monotonic() - started, 2)


def _first_pod_running(plane: ControlPlane, image: str) -> float:
    """Seconds from creating a pod of the opbroker image to its phase Running."""
    api = config.new_client_from_config(config_file=str(plane.kubeconfig))
    core = client.CoreV1Api(api)
    pod = {
        "metadata": {"name": "bench-first-pod", "namespace": "default"},
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "image": image,
                    "imagePullPolicy": "Never",
                    "command": ["python3", "-c", "import time; time.sleep(600)"],
                }
            ],
            # The default service account is created by a controller shortly after start: do not wait for it.
            "automountServiceAccountToken": False,
        },
    }
    started = time.monotonic()
    while True:
        try:
            core.create_namespaced_pod("default", pod)
            break
        except client.ApiException as exc:  # the default ServiceAccount may not exist yet
            if exc.status != 403 and "serviceaccount" not in (exc.body or "").lower():
                raise
            time.sleep(0.1)
    while time.monotonic() - started < POD_TIMEOUT:
        if core.read_namespaced_pod("bench-first-pod", "default").status.phase == "Running":
            api.close()
            return round(time.monotonic() - started, 2)
        time.sleep(0.1)
    api.close()
    raise RuntimeError(f"the first pod did not run within {POD_TIMEOUT:.0f}s")


def run() -> dict[str, Any]:
    builds = [json.loads(record.read_text()) for record in sorted(kube_bin_dir().parent.glob("build-*.json"))]

    image_started = time.monotonic()
    archive, image = opbroker_image(progress=lambda _m: None, use_cache=False)
    image_seconds = round(time.monotonic() - image_started, 1)

    suffix = os.getpid()
    plane, bare_seconds = _start(f"bench-bare-{suffix}", node=False)
    bare_rss = _processes(plane)
    plane.down(progress=lambda _m: None)

    assert find_node_binaries() is not None, "build the node first: opbroker cluster build --node"
    up_started = time.monotonic()
    plane, node_seconds = _start(f"bench-node-{suffix}", node=True)
    try:
        plane.import_image(archive, image)
        pod_seconds = _first_pod_running(plane, opbroker_image_name().removeprefix("docker.io/library/"))
        up_to_pod = round(time.monotonic() - up_started, 2)
        node_rss = _processes(plane)
    finally:
        plane.down(progress=lambda _m: None)
    return {
        "kubernetes": KUBE_VERSION,
        "cold_build": builds,
        "image": {"build_seconds": image_seconds, "archive_mib": round(archive.stat().st_size / 2**20, 1)},
        "start_seconds": {"control_plane": bare_seconds, "control_plane_and_node": node_seconds},
        "rss_mib": {"control_plane": bare_rss, "with_node": node_rss},
        "pod_running_seconds": {"create_to_running": pod_seconds, "up_to_running": up_to_pod},
    }
