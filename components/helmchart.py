"""A Helm chart of the ControlPlane component's objects: ``opbroker manifests --helm-chart DIR`` writes it.

Why generated and not written by hand: the chart is the component's own objects
(:func:`opbroker.components.objects.control_plane_manifests`), so it cannot drift from what ``pulumi up`` and
``opbroker manifests`` install. The settings a Helm user changes per release are values; they are found in the
rendered objects by rendering the component with a sentinel in their place (a namespace, an image, a username
and a password nobody would choose) or by their place (replicas, pull policy, the credentials' Secret), and
replaced by template expressions. Everything else (tenant namespaces, operator rules, autoscaling, ...) is fixed
when the chart is generated, from the same args ``opbroker manifests`` takes.

What the chart does differently, as Helm does it:

- The CRDs go into ``crds/``: Helm installs them once and never upgrades or deletes them, which is the
  component's default (``retain_crds``): ``helm uninstall`` leaves every SFService, SFPlan, instance and binding.
- The broker's password is never in the chart: ``broker.password`` (a value given at install) or
  ``broker.existingSecret`` (a Secret of the user's, keys ``username`` and ``password``); neither fails the install.
- ``app.kubernetes.io/managed-by`` says ``Helm``.
- A chart generated with ``controller.shards`` > 1 (a StatefulSet) has the value ``controller.shards`` (2 or more:
  going back to one shard, a Deployment, means generating the chart again); it sets the controller's and the
  broker's ``--shards``, the StatefulSet's replicas (``shards * controller.replicas``) and the shards' Lease names in
  the controller's Role. A chart generated unsharded has no such value.
"""

import copy
import json
from typing import Any

import yaml

from opbroker.api.controllerinstall import Names
from opbroker.api.conventions import DEFAULT_NAMESPACE
from opbroker.api.rbac import LEADER_LEASE, MAX_SHARDS
from opbroker.components.objects import control_plane_manifests, relabel_managed_by

CHART_NAME = "opbroker"
#: Stand-ins the component renders in place of a value (each valid where it goes, and unlike any real one).
NAMESPACE_SENTINEL = "zz-helm-namespace-sentinel"
IMAGE_SENTINEL = "zz-helm-image-sentinel"
USERNAME_SENTINEL = "zz-helm-username-sentinel"
PASSWORD_SENTINEL = "zz-helm-password-sentinel"
#: Tokens put in place of values that are not strings, or that the component fixes (replicas, pull policy).
_TOKEN = "zz-helm-token-{}"
_EXPRESSIONS = {
    NAMESPACE_SENTINEL: "{{ .Values.namespace }}",
    IMAGE_SENTINEL: "{{ .Values.image }}",
    USERNAME_SENTINEL: "{{ .Values.broker.username | quote }}",
    PASSWORD_SENTINEL: (
        '{{ required "set broker.password, or broker.existingSecret to a Secret of yours" .Values.broker.password'
        " | quote }}"
    ),
    _TOKEN.format("pull-policy"): "{{ .Values.imagePullPolicy }}",
    _TOKEN.format("controller-replicas"): "{{ .Values.controller.replicas }}",
    _TOKEN.format("sharded-replicas"): "{{ mul .Values.controller.shards .Values.controller.replicas }}",
    _TOKEN.format("shards"): "{{ .Values.controller.shards | quote }}",
    # A flow sequence: opbroker.api.rbac.shard_leases, as Helm counts.
    _TOKEN.format("shard-leases"): (
        "[{{ range $i := until (int .Values.controller.shards) }}{{ if $i }}, {{ end }}"
        + LEADER_LEASE
        + "-shard-{{ $i }}{{ end }}]"
    ),
    _TOKEN.format("broker-replicas"): "{{ .Values.broker.replicas }}",
    _TOKEN.format("credentials"): "{{ .Values.broker.existingSecret | default %s }}",
}
_PULL_POLICIES = ["IfNotPresent", "Always", "Never"]
_DNS_LABEL = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"


class ChartError(ValueError):
    """The args cannot become a chart (a password in them: it belongs to the install, not the chart)."""


def chart_files(args: dict[str, Any], version: str, existing_secret: str = "") -> dict[str, str]:
    """The chart's files (path relative to the chart's folder → text) for the ControlPlane ``args``.

    ``version``: the chart's and the app's version (opbroker's). ``args`` give the values' defaults; they may
    not hold ``broker.password``. ``existing_secret``: the default of ``broker.existingSecret``.
    """
    broker_args = dict(args.get("broker") or {})
    if "password" in broker_args:
        raise ChartError(
            "broker.password is not written into a chart: give it at install (--set broker.password=...) "
            "or name a Secret of yours (--set broker.existingSecret=NAME)"
        )
    values: dict[str, Any] = {
        "namespace": args.get("namespace", DEFAULT_NAMESPACE),
        "createNamespace": args.get("create_namespace", True),
        "image": args.get("image"),
        "imagePullPolicy": args.get("image_pull_policy", "IfNotPresent"),
        "controller": {"replicas": (args.get("controller") or {}).get("replicas", 2)},
        "broker": {
            "username": broker_args.get("username", "opbroker"),
            "password": "",
            "existingSecret": existing_secret,
        },
    }
    if "autoscaling" not in broker_args:
        values["broker"] = {"replicas": broker_args.get("replicas", 2), **values["broker"]}
    shards = (args.get("controller") or {}).get("shards", 1)
    if shards != 1:  # an invalid count is refused by the component below, naming controller.shards
        values["controller"]["shards"] = shards
    rendered_args = copy.deepcopy(args)
    rendered_args.update(namespace=NAMESPACE_SENTINEL, image=IMAGE_SENTINEL, create_namespace=True)
    rendered_args["broker"] = {**broker_args, "username": USERNAME_SENTINEL, "password": PASSWORD_SENTINEL}
    manifests = relabel_managed_by(control_plane_manifests(rendered_args), "Helm")

    files = {
        "Chart.yaml": _dump(
            {
                "apiVersion": "v2",
                "name": CHART_NAME,
                "description": "opbroker: Kubernetes operators as managed services (OSB broker and controller)",
                "type": "application",
                "version": version,
                "appVersion": version,
            }
        ),
        "values.yaml": _VALUES_HEADER + _dump(values),
        "values.schema.json": json.dumps(_schema(values), indent=2) + "\n",
        "templates/NOTES.txt": _NOTES,
    }
    documents: list[str] = []
    for manifest in manifests:
        if manifest["kind"] == "CustomResourceDefinition":
            text = _dump(manifest)
            if NAMESPACE_SENTINEL in text:  # pragma: no cover - a CRD that names the namespace cannot go in crds/
                raise ChartError(f"CRD {manifest['metadata']['name']} names the control plane's namespace")
            files[f"crds/{manifest['metadata']['name']}.yaml"] = text
            continue
        documents.append(_template(_tokenised(manifest)))
    files["templates/opbroker.yaml"] = "\n---\n".join(documents)
    return files


def _tokenised(manifest: dict[str, Any]) -> dict[str, Any]:
    """The manifest with tokens where a value goes that the component does not take as a sentinel string."""
    names = Names(NAMESPACE_SENTINEL)
    credentials = names.broker_credentials
    if manifest["kind"] == "Role" and manifest["metadata"]["name"] == names.leader_election:
        for rule in manifest["rules"]:  # the Leases a shard renews (the unsharded Role reads every shard's: fixed)
            renewed = "update" in rule["verbs"]
            if renewed and any(name.startswith(f"{LEADER_LEASE}-shard-") for name in rule.get("resourceNames", [])):
                rule["resourceNames"] = _TOKEN.format("shard-leases")
        return manifest
    if manifest["kind"] not in ("Deployment", "StatefulSet"):
        return manifest
    component = manifest["metadata"]["labels"].get("app.kubernetes.io/component", "")
    if "replicas" in manifest["spec"] and component in ("controller", "broker"):
        sharded = manifest["kind"] == "StatefulSet"
        manifest["spec"]["replicas"] = _TOKEN.format("sharded-replicas" if sharded else f"{component}-replicas")
    for container in manifest["spec"]["template"]["spec"]["containers"]:
        container["imagePullPolicy"] = _TOKEN.format("pull-policy")
        command = container["command"]
        for index, word in enumerate(command[:-1]):
            if word == "--shards":
                command[index + 1] = _TOKEN.format("shards")
        for variable in container.get("env", []):
            reference = variable.get("valueFrom", {}).get("secretKeyRef")
            if reference is not None and reference.get("name") == credentials:
                reference["name"] = _TOKEN.format("credentials")
    return manifest


def _template(manifest: dict[str, Any]) -> str:
    """One object's template: sentinels and tokens replaced by expressions, optional objects behind their value."""
    text = _dump(manifest)
    for stand_in, expression in _EXPRESSIONS.items():
        if "%s" in expression:
            expression = expression % json.dumps(Names(NAMESPACE_SENTINEL).broker_credentials)
        text = text.replace(stand_in, expression)
    if manifest["kind"] == "Namespace":
        return "{{- if .Values.createNamespace }}\n" + text + "{{- end }}\n"
    if manifest["kind"] == "Secret" and PASSWORD_SENTINEL in _dump(manifest):
        return "{{- if not .Values.broker.existingSecret }}\n" + text + "{{- end }}\n"
    return text


def _dump(document: dict[str, Any]) -> str:
    return yaml.safe_dump(document, sort_keys=False, default_flow_style=False, width=1000)


def _schema(values: dict[str, Any]) -> dict[str, Any]:
    """values.schema.json: Helm refuses values the component would refuse, before anything is applied."""
    replicas = {"type": "integer", "minimum": 1}
    broker: dict[str, Any] = {
        "username": {"type": "string", "minLength": 1, "pattern": "^[^:]+$"},
        "password": {"type": "string"},
        "existingSecret": {"type": "string"},
    }
    if "replicas" in values["broker"]:
        broker["replicas"] = replicas
    return {
        "$schema": "https://json-schema.org/draft-07/schema#",
        "type": "object",
        "additionalProperties": False,
        "required": ["namespace", "image"],
        "properties": {
            "namespace": {"type": "string", "pattern": _DNS_LABEL, "maxLength": 63},
            "createNamespace": {"type": "boolean"},
            "image": {"type": "string", "minLength": 1},
            "imagePullPolicy": {"enum": _PULL_POLICIES},
            "controller": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "replicas": replicas,
                    **(
                        {"shards": {"type": "integer", "minimum": 2, "maximum": MAX_SHARDS}}
                        if "shards" in values["controller"]
                        else {}
                    ),
                },
            },
            "broker": {"type": "object", "additionalProperties": False, "properties": broker},
        },
    }


_VALUES_HEADER = """\
# Generated by `opbroker manifests --helm-chart`: the ControlPlane component's objects. Settings other than these
# (tenant namespaces, operator rules, autoscaling, ...) were fixed when the chart was generated: generate it again
# with other --set/--values to change them.
#
# broker.password or broker.existingSecret (a Secret with the keys username and password) must be given at install.
"""

_NOTES = """\
opbroker's controller and broker run in the namespace {{ .Values.namespace }}.
The OSB broker: http://opbroker-broker.{{ .Values.namespace }}.svc:8080 (basic auth
{{- if .Values.broker.existingSecret }} from the Secret {{ .Values.broker.existingSecret }}
{{- else }} {{ .Values.broker.username }} and the password you gave{{ end }}).
The CRDs stay when the release is uninstalled: delete them (docs/install-without-pulumi.md) only when no catalog
object, instance or binding should remain.
"""
