"""Template functions, registries and generated secrets.

Aspects covered: every data function and filter (table), ``parameter`` as an RFC 6901 pointer into the
request's parameters, ``default``/``required`` semantics and messages, ``merge``/``omit``/``pick``;
registry keys (read-only, reserved, read-write, user-defined) and how instance and binding registries are
built and inherited; generators remember their values so re-renders are byte-identical and refuse to
generate where nothing could be persisted; certificates self-signed or signed by a CA from the registry;
snippets shared through ``{% include %}`` and ``{% import %}``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID

from opbroker.api import SFPlan, TemplateAction
from opbroker.rendering import Renderer, RenderError, RenderInputs, binding_registry, instance_registry

RENDERER = Renderer()
HEAD = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\ndata:\n"
INSTANCE = {
    "apiVersion": "osb.servicefabrik.io/v1alpha1",
    "kind": "SFServiceInstance",
    "metadata": {"name": "inst-1", "namespace": "team-a"},
    "spec": {
        "instanceId": "inst-1",
        "serviceId": "svc-id",
        "planId": "plan-id",
        "context": {"namespace": "team-a"},
        "parameters": {"db": {"name": "orders", "size": 3}, "a/b": "slash", "m~n": "tilde", "list": ["x", "y"]},
    },
}
BINDING = {
    "metadata": {"name": "bind-1"},
    "spec": {
        "id": "bind-1",
        "instanceId": "inst-1",
        "serviceId": "svc-id",
        "planId": "plan-id",
        "parameters": {"role": "ro"},
    },
}


def make_plan(*templates: tuple[str, str], snippets: dict[str, str] | None = None) -> SFPlan:
    return SFPlan.model_validate(
        {
            "metadata": {"name": "functions"},
            "spec": {
                "name": "p",
                "id": "plan-id",
                "description": "d",
                "serviceId": "svc-id",
                "templates": [{"action": a, "type": "jinja2", "content": c} for a, c in templates],
                "snippets": snippets,
            },
        }
    )


def inputs(**overrides: Any) -> RenderInputs:
    return RenderInputs(**({"instance": INSTANCE, "default_namespace": "opbroker"} | overrides))


def data(body: str, **overrides: Any) -> Any:
    rendered = RENDERER.render_objects(
        make_plan(("provision", HEAD + body)), TemplateAction.PROVISION, inputs(**overrides)
    )
    return rendered.objects[0].manifest.get("data")


@pytest.mark.parametrize(
    ("expression", "want"),
    [
        ("b64enc('hello')", "aGVsbG8="),
        ("'aGVsbG8=' | b64dec", "hello"),
        ("b64enc(none)", None),
        ("toJson({'a': [1, true, none]})", '{"a":[1,true,null]}'),
        ("fromJson('{\"a\": [1, 2]}')", {"a": [1, 2]}),
        ("{'a': {'b': [1, 2]}} | toYaml", "a:\n  b:\n  - 1\n  - 2"),
        ("fromYaml('a: [1, 2]')", {"a": [1, 2]}),
        ("'inst-1' | sha224", "74c18e7805559d8d6c790ba7ea18f4a70ea9eeff9c3b2c876b81a00f"),
        ("parameter('/db/name')", "orders"),
        ("parameter('/db/size') + 1", 4),
        ("parameter('/a~1b')", "slash"),
        ("parameter('/m~0n')", "tilde"),
        ("parameter('/list/1')", "y"),
        ("parameter('/missing')", None),
        ("parameter('/missing', 'fallback')", "fallback"),
        ("parameter('')['db']['name']", "orders"),
        ("none | default('d')", "d"),
        ("undefined_thing | default('d')", "d"),
        ("'' | default('d')", ""),
        ("'' | default('d', true)", "d"),
        ("0 | default(5)", 0),
        ("default(none, 'x')", "x"),
        ("required('x', 'thing')", "x"),
        ("{'a': {'b': 1, 'c': 2}} | merge({'a': {'c': 3, 'd': 4}})", {"a": {"b": 1, "c": 3, "d": 4}}),
        ("{'a': {'b': 1, 'c': 2}} | merge({'a': {'b': none}})", {"a": {"c": 2}}),
        ("{'a': 1} | merge({'b': 2}, {'a': 3})", {"a": 3, "b": 2}),
        ("{'a': 1, 'b': 2, 'c': 3} | omit('a', 'c')", {"b": 2}),
        ("{'a': 1, 'b': 2} | pick('a', 'z')", {"a": 1}),
        ("dict(a=1)", {"a": 1}),
        ("registry('instance-id')", "inst-1"),
        ("registry('namespace')", "team-a"),
        ("registry('plan-id') ~ '/' ~ registry('service-id')", "plan-id/svc-id"),
        ("registry('nothing-here', 'fallback')", "fallback"),
    ],
)
def test_functions(expression: str, want: Any) -> None:
    assert data("  v: {{ " + expression + " }}", context_namespace="team-a") == ({} if want is None else {"v": want})


def test_functions_do_not_mutate_their_inputs() -> None:
    original = json.loads(json.dumps(INSTANCE))
    data("  v: {{ instance.spec | merge({'parameters': {'db': none}}) | omit('planId') }}")
    assert original == INSTANCE


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("required(parameter('/dbname'), 'parameter /dbname')", "required: parameter /dbname is missing"),
        ("parameter('/dbname') | required('the database name')", "required: the database name is missing"),
        ("required('')", "required: a required value is missing"),
        ("parameter('db/name')", "'db/name' is not a JSON pointer"),
        ("parameter('/list/9')", None),
        ("'%%%' | b64dec", "b64dec: not base64"),
        ("fromJson('{')", "fromJson: not valid JSON"),
        ("fromYaml('a: [')", "fromYaml: not valid YAML"),
        ("registry('parameters')", "registry: key 'parameters' is reserved"),
        ("registry('operation-id')", "registry: key 'operation-id' is reserved"),
        ("setRegistry('namespace', 'x')", "setRegistry: registry key 'namespace' is read-only"),
        ("setRegistry('instance-id', 'x')", "read-only"),
        ("setRegistry('context', {})", "read-only"),
        ("generatePrivateKey('k', 'dsa-512')", "unknown algorithm 'dsa-512'"),
        ("generatePassword('p', 4)", "length must be between 8 and 1024"),
    ],
)
def test_function_errors_name_the_problem(expression: str, message: str | None) -> None:
    if message is None:  # an index past the end is absent, like a missing key
        assert data("  v: {{ " + expression + " }}") == {}
        return
    with pytest.raises(RenderError) as caught:
        data("  v: {{ " + expression + " }}")
    assert message in str(caught.value)
    assert "plan 'functions', action 'provision', template provision line 6" in str(caught.value)


def test_parameters_are_the_bindings_for_bind_templates() -> None:
    plan = make_plan(("bind", HEAD + "  role: {{ parameter('/role') }}\n  db: {{ parameter('/db/name') }}"))
    rendered = RENDERER.render_objects(plan, TemplateAction.BIND, inputs(binding=BINDING))
    assert rendered.objects[0].manifest["data"] == {"role": "ro"}


# -- registries ------------------------------------------------------------------------------------------------


def test_instance_registry_starts_from_the_request() -> None:
    registry = instance_registry(INSTANCE, namespace="team-a")
    assert registry == {
        "namespace": "team-a",
        "instance-id": "inst-1",
        "service-id": "svc-id",
        "plan-id": "plan-id",
        "context": {"namespace": "team-a"},
        "parameters": INSTANCE["spec"]["parameters"],
    }
    assert registry["parameters"] is not INSTANCE["spec"]["parameters"], "registries hold copies"


def test_binding_registry_inherits_the_instance_keys_at_creation() -> None:
    instance = {**instance_registry(INSTANCE, namespace="team-a"), "pg-password": "s3cr3t"}
    registry = binding_registry(instance, BINDING)
    assert registry["pg-password"] == "s3cr3t"
    assert registry["instance-id"] == "inst-1"
    assert registry["binding-id"] == "bind-1"
    assert registry["parameters"] == {"role": "ro"}
    instance["pg-password"] = "changed"
    assert registry["pg-password"] == "s3cr3t"


def test_an_existing_binding_registry_is_not_updated_from_the_instance() -> None:
    plan = make_plan(("bind", HEAD + "  pw: {{ registry('pg-password') }}"))
    rendered = RENDERER.render_objects(
        plan,
        TemplateAction.BIND,
        inputs(
            binding=BINDING,
            registry={"pg-password": "new-instance-value"},
            binding_registry={"pg-password": "value-at-bind-time", "binding-id": "bind-1"},
        ),
    )
    assert rendered.objects[0].manifest["data"] == {"pw": "value-at-bind-time"}
    assert rendered.registry["pg-password"] == "new-instance-value"


def test_read_write_and_user_keys_can_be_set() -> None:
    plan = make_plan(
        ("provision", HEAD + "  v: {{ setRegistry('dashboard-url', 'https://db.example/' ~ registry('instance-id')) }}")
    )
    rendered = RENDERER.render_objects(plan, TemplateAction.PROVISION, inputs())
    assert rendered.registry["dashboard-url"] == "https://db.example/inst-1"
    assert rendered.objects[0].manifest["data"] == {"v": "https://db.example/inst-1"}


# -- generators --------------------------------------------------------------------------------------------------

SECRETS_PLAN = make_plan(
    (
        "provision",
        """\
apiVersion: v1
kind: Secret
metadata:
  name: {{ instance.metadata.name }}-tls
stringData:
  password: {{ generatePassword('admin-password', 24) }}
  ca.crt: |
    {{ generatePrivateKey('ca-key', 'ecdsa-p256') and generateCertificate('ca-crt', privateKey='ca-key',
       commonName='ca', isCA=true) | indent(4) }}
  tls.key: {{ generatePrivateKey('server-key', 'rsa-2048') | toJson }}
  tls.crt: {{ generateCertificate('server-crt', privateKey='server-key', commonName='db', caCert='ca-crt',
              caKey='ca-key', dnsNames=['db.team-a.svc', 'db'], ipAddresses=['10.0.0.1']) | toJson }}
""",
    ),
    ("bind", HEAD + "  password: {{ registry('admin-password') }}\n  mine: {{ generatePassword('bind-pw') }}"),
    ("status", "provision:\n  state: succeeded\n  description: {{ generatePassword('status-pw') }}"),
)


def test_generated_secrets_are_stored_and_re_rendering_is_byte_identical() -> None:
    first = RENDERER.render_objects(SECRETS_PLAN, TemplateAction.PROVISION, inputs())
    password = first.objects[0].manifest["stringData"]["password"]
    assert len(password) == 24 and password.isalnum()
    assert first.registry["admin-password"] == password
    assert {"ca-key", "ca-crt", "server-key", "server-crt"} <= set(first.registry)
    again = Renderer().render_objects(SECRETS_PLAN, TemplateAction.PROVISION, inputs(registry=first.registry))
    assert [yaml.safe_dump(o.manifest) for o in again.objects] == [yaml.safe_dump(o.manifest) for o in first.objects]
    assert again.registry == first.registry
    other = RENDERER.render_objects(SECRETS_PLAN, TemplateAction.PROVISION, inputs())
    assert other.registry["admin-password"] != password, "a fresh registry generates fresh secrets"


def test_a_server_certificate_is_signed_by_the_ca_in_the_registry() -> None:
    registry = RENDERER.render_objects(SECRETS_PLAN, TemplateAction.PROVISION, inputs()).registry
    ca = x509.load_pem_x509_certificate(registry["ca-crt"].encode())
    server = x509.load_pem_x509_certificate(registry["server-crt"].encode())
    server.verify_directly_issued_by(ca)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    assert server.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    names = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["db.team-a.svc", "db"]
    assert [str(ip) for ip in names.get_values_for_type(x509.IPAddress)] == ["10.0.0.1"]
    usage = server.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.SERVER_AUTH]
    key = serialization.load_pem_private_key(registry["server-key"].encode(), password=None)
    assert isinstance(key, rsa.RSAPrivateKey) and key.key_size == 2048
    assert server.public_key() == key.public_key()
    assert isinstance(serialization.load_pem_private_key(registry["ca-key"].encode(), None), ec.EllipticCurvePrivateKey)


def test_a_certificate_without_a_ca_is_self_signed() -> None:
    plan = make_plan(
        (
            "provision",
            HEAD + "  c: {{ generatePrivateKey('k', 'ed25519') and generateCertificate('c', privateKey='k', "
            "commonName='self', usage=['client']) | toJson }}",
        )
    )
    registry = RENDERER.render_objects(plan, TemplateAction.PROVISION, inputs()).registry
    cert = x509.load_pem_x509_certificate(registry["c"].encode())
    cert.verify_directly_issued_by(cert)
    assert list(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == [
        ExtendedKeyUsageOID.CLIENT_AUTH
    ]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        ("generateCertificate('c', privateKey='nope', commonName='x')", "no private key in registry key 'nope'"),
        ("generateCertificate('c', privateKey='k', commonName='x', caCert='ca')", "caCert and caKey go together"),
        ("generateCertificate('c', privateKey='k', commonName='x', caCert='a', caKey='k')", "no certificate in"),
        ("generateCertificate('c', privateKey='k', commonName='x', usage='peer')", "unknown usage"),
        ("generateCertificate('c', privateKey='k', commonName='x', ipAddresses=['n/a'])", "does not appear to be"),
    ],
)
def test_certificate_errors_are_clear(call: str, message: str) -> None:
    with pytest.raises(RenderError, match=message):
        data("  v: {{ generatePrivateKey('k') and " + call + " }}")


def test_bindings_read_the_instances_secrets_and_generate_into_their_own_registry() -> None:
    provisioned = RENDERER.render_objects(SECRETS_PLAN, TemplateAction.PROVISION, inputs())
    bound = RENDERER.render_objects(
        SECRETS_PLAN, TemplateAction.BIND, inputs(binding=BINDING, registry=provisioned.registry)
    )
    assert bound.objects[0].manifest["data"]["password"] == provisioned.registry["admin-password"]
    assert bound.binding_registry is not None
    assert bound.binding_registry["bind-pw"] == bound.objects[0].manifest["data"]["mine"]
    assert "bind-pw" not in bound.registry, "a binding's values stay in the binding registry"


def test_observing_templates_cannot_generate_secrets() -> None:
    with pytest.raises(RenderError, match="generatePassword: cannot store 'status-pw' here"):
        RENDERER.render_status(SECRETS_PLAN, inputs())
    result = RENDERER.render_status(SECRETS_PLAN, inputs(registry={"status-pw": "already-there"}))
    assert result.provision is not None and result.provision.description == "already-there"


# -- snippets ----------------------------------------------------------------------------------------------------


def test_snippets_are_shared_through_include_and_import() -> None:
    plan = make_plan(
        (
            "provision",
            '{% import "macros" as m with context %}'
            + HEAD
            + '  name: {% include "name" %}\n  labels: {{ m.labels() }}\n',
        ),
        ("sources", 'db:\n  apiVersion: v1\n  kind: Service\n  name: {% include "name" %}'),
        snippets={
            "name": "{{ plan.spec.id }}-{{ instance.metadata.name }}",
            "macros": "{% macro labels() %}app={{ instance.metadata.name }}{% endmacro %}",
        },
    )
    rendered = RENDERER.render_objects(plan, TemplateAction.PROVISION, inputs())
    assert rendered.objects[0].manifest["data"] == {"name": "plan-id-inst-1", "labels": "app=inst-1"}
    assert RENDERER.render_sources(plan, inputs())["db"].name == "plan-id-inst-1"


def test_an_error_inside_a_snippet_names_the_snippet_and_its_line() -> None:
    plan = make_plan(("provision", HEAD + '  v: {% include "broken" %}'), snippets={"broken": "ok\n{{ 1 / 0 }}"})
    with pytest.raises(RenderError, match=r"template provision via snippet 'broken' line 2: ZeroDivisionError"):
        RENDERER.render_objects(plan, TemplateAction.PROVISION, inputs())


def test_plans_with_different_snippets_do_not_share_them() -> None:
    body = HEAD + '  v: {% include "s" %}'
    one = make_plan(("provision", body), snippets={"s": "one"})
    two = make_plan(("provision", body), snippets={"s": "two"})
    assert RENDERER.render_objects(one, TemplateAction.PROVISION, inputs()).objects[0].manifest["data"] == {"v": "one"}
    assert RENDERER.render_objects(two, TemplateAction.PROVISION, inputs()).objects[0].manifest["data"] == {"v": "two"}
