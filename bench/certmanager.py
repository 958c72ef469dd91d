"""Time from an OSB provision of the certificates plan (examples/certificates, cert-manager behind it) to
credentials a TLS library accepts, and from a renewal by cert-manager to the renewed certificate in GET binding.

On a fresh bench stack (control plane, controller, broker; ``bench_stack``) cert-manager's controller runs as a
process with its own least-rights kubeconfig (``opbroker.devcluster.certmanager``). For each of N instances, one
after another: PUT provision → last_operation polled (0.2 s) until succeeded → PUT bind → polled → GET binding,
its certificate verified against its CA (cryptography) — timed per step and end to end; then a manual renewal
(the Issuing condition, as ``cmctl renew``) until GET binding answers the new certificate. Polling adds up to
0.2 s to each step, and the broker's own polling of the controller is what a platform sees too.

Run: ``flock /tmp/bench.lock python -m bench.certmanager --instances 5`` (``--json PATH``). Results:
``bench/results/CERTMANAGER.md`` and ``bench/results/certmanager-<date>.json``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import yaml
from cryptography import x509
from kubernetes import client

from bench.common import bench_stack, machine, summary
from opbroker.api.conventions import DEFAULT_NAMESPACE
from opbroker.devcluster import certmanager
from opbroker.devcluster.grants import grant_plan_account
from opbroker.devcluster.incluster import DEMO_OPERATOR_RULE
from opbroker.devcluster.processes import Process

REPO = Path(__file__).resolve().parent.parent
CATALOG = REPO / "examples" / "certificates" / "catalog.yaml"
RESULTS = REPO / "bench" / "results"
POLL = 0.2
STEP_DEADLINE = 120.0


def _poll(osb: httpx.Client, path: str, operation: str) -> str:
    deadline = time.monotonic() + STEP_DEADLINE
    while time.monotonic() < deadline:
        answer = osb.get(f"{path}/last_operation", params={"operation": operation})
        state = answer.json()["state"] if answer.status_code == 200 else "gone"
        if state != "in progress":
            return str(state)
        time.sleep(POLL)
    raise TimeoutError(f"{path}: still in progress after {STEP_DEADLINE}s")


def _verified(credentials: dict[str, Any]) -> x509.Certificate:
    certificate = x509.load_pem_x509_certificate(credentials["certificate"].encode())
    certificate.verify_directly_issued_by(x509.load_pem_x509_certificate(credentials["ca"].encode()))
    return certificate


def _renew(api: client.ApiClient, namespace: str, name: str) -> None:
    custom = client.CustomObjectsApi(api)
    found = custom.get_namespaced_custom_object("cert-manager.io", "v1", namespace, "certificates", name)
    conditions = [c for c in found["status"].get("conditions", []) if c["type"] != "Issuing"]
    conditions.append(
        {
            "type": "Issuing",
            "status": "True",
            "reason": "ManuallyTriggered",
            "message": "Certificate re-issuance manually triggered",
            "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "observedGeneration": found["metadata"]["generation"],
        }
    )
    found["status"]["conditions"] = conditions
    custom.replace_namespaced_custom_object_status("cert-manager.io", "v1", namespace, "certificates", name, found)


def run(instances: int) -> dict[str, Any]:
    service, plan = list(yaml.safe_load_all(CATALOG.read_text()))
    ids = {"service_id": service["spec"]["id"], "plan_id": plan["spec"]["id"]}
    certmanager.ensure_built()
    rows: list[dict[str, float]] = []
    with bench_stack("certmanager") as bench, tempfile.TemporaryDirectory() as folder:
        grant_plan_account(bench.api, DEFAULT_NAMESPACE, [DEMO_OPERATOR_RULE, *certmanager.PLAN_RULES])
        for doc in yaml.safe_load_all(CATALOG.read_text()):
            plural = {"SFService": "sfservices", "SFPlan": "sfplans"}[doc["kind"]]
            client.CustomObjectsApi(bench.api).create_namespaced_custom_object(
                "osb.servicefabrik.io", "v1alpha1", DEFAULT_NAMESPACE, plural, doc
            )
        certmanager.install(bench.api)
        kubeconfig = certmanager.write_kubeconfig(bench.api, bench.endpoint.kubeconfig, Path(folder) / "kubeconfig")
        process = Process("cert-manager", list(certmanager.controller_command(kubeconfig)), Path(folder))
        process.start()
        try:
            namespace = bench.namespace(f"certs-{uuid.uuid4().hex[:6]}")
            body = {**ids, "organization_guid": "o", "space_guid": "s"}
            body["context"] = {"platform": "kubernetes", "namespace": namespace}
            with bench.osb(4) as osb:
                for _ in range(instances):
                    instance = str(uuid.uuid4())
                    path = f"/v2/service_instances/{instance}"
                    binding = f"{path}/service_bindings/{uuid.uuid4()}"
                    t0 = time.monotonic()
                    accepted = osb.put(path, params={"accepts_incomplete": "true"}, json=body)
                    assert _poll(osb, path, accepted.json()["operation"]) == "succeeded"
                    t1 = time.monotonic()
                    bound = osb.put(binding, params={"accepts_incomplete": "true"}, json=body)
                    assert bound.status_code == 202, bound.text
                    assert _poll(osb, binding, bound.json()["operation"]) == "succeeded"
                    credentials = osb.get(binding).json()["credentials"]
                    first = _verified(credentials)
                    t2 = time.monotonic()
                    _renew(bench.api, namespace, instance)
                    while True:
                        if time.monotonic() - t2 > STEP_DEADLINE:
                            raise TimeoutError("no renewed certificate in GET binding")
                        fresh = osb.get(binding).json()["credentials"]
                        if fresh["certificate"] != credentials["certificate"]:
                            break
                        time.sleep(POLL)
                    assert _verified(fresh).serial_number != first.serial_number
                    t3 = time.monotonic()
                    rows.append(
                        {"provision": t1 - t0, "bind": t2 - t1, "provision_to_credentials": t2 - t0, "renewal": t3 - t2}
                    )
                    print(f"  [certmanager] {instance}: " + ", ".join(f"{k} {v:.2f} s" for k, v in rows[-1].items()))
        finally:
            process.stop()
    return {
        "machine": machine(),
        "instances": instances,
        "seconds": {key: summary([row[key] for row in rows]) for key in rows[0]},
        "runs": rows,
    }


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"# cert-manager through OSB ({result['instances']} instances, one after another)",
        "",
        f"Machine: {result['machine']}",
        "",
        "| step | p50 s | max s |",
        "|---|---|---|",
    ]
    for key, figures in result["seconds"].items():
        lines.append(f"| {key} | {figures['p50']:.2f} | {figures['max']:.2f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=5)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    result = run(args.instances)
    path = args.json or RESULTS / f"certmanager-{time.strftime('%Y-%m-%d')}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    (RESULTS / "CERTMANAGER.md").write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
