"""Preview-time policies for stacks that use opbroker — whether or not they use its components.

They look at what reaches the engine: every ``SFPlan`` custom resource (from the components, a YAML
ConfigGroup, or hand-written ``CustomResource``) and every ``Role`` / ``ClusterRole``:

* ``opbroker-plan-valid``: the plan's spec fits the resource model, and every template is of a type
  opbroker renders (``jinja2`` in-process; Service Fabrik's ``gotemplate`` and ``helm`` through the Go
  renderer), a helm chart only for the actions a chart can render (provision, bind, unbind);
* ``opbroker-parameter-schemas-valid``: every parameter schema is a valid JSON Schema;
* ``opbroker-no-wildcard-rbac``: no RBAC rule grants ``*`` verbs on ``*`` resources.

The decisions are pure functions (``plan_problems``, ``schema_problems``, ``rbac_problems``) over the
resource's inputs; the policies only report them. The ``PolicyPack`` is built in the pack's entry point
(``provider/policypack/__main__.py``) because its constructor starts a gRPC server.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jsonschema
from pulumi_policy import EnforcementLevel, Policy, ReportViolation, ResourceValidationArgs, ResourceValidationPolicy
from pydantic import ValidationError

from opbroker.api import SFPlan, SFPlanSpec, TemplateType, errors
from opbroker.components import rbac

SFPLAN_TYPE = f"kubernetes:{SFPlan.api_version_string()}:{SFPlan.KIND}"
RBAC_TYPES = frozenset(
    {
        "kubernetes:rbac.authorization.k8s.io/v1:ClusterRole",
        "kubernetes:rbac.authorization.k8s.io/v1:Role",
    }
)
#: Template types the controller renders. Update when ``opbroker.rendering`` learns more.
RENDERED_TEMPLATE_TYPES = frozenset(t.value for t in TemplateType)
#: The actions a helm chart can render: objects, never sources, status or a cluster selector.
HELM_ACTIONS = frozenset({"provision", "bind", "unbind"})
#: Where a plan keeps its parameter schemas (OSB catalog spelling, as on the wire).
SCHEMA_PATHS = (
    ("service_instance", "create"),
    ("service_instance", "update"),
    ("service_binding", "create"),
)


def plan_problems(props: Mapping[str, Any]) -> list[str]:
    """Why an SFPlan's inputs are not a plan opbroker can serve (empty when they are)."""
    spec = props.get("spec")
    if not isinstance(spec, Mapping):
        return ["spec: an SFPlan needs a spec"]
    try:
        SFPlanSpec.model_validate(spec)
    except ValidationError as exc:
        return [f"spec.{line}" for line in errors.field_errors(exc)]
    problems = []
    for index, template in enumerate(spec.get("templates") or []):
        kind = template.get("type") if isinstance(template, Mapping) else None
        if kind not in RENDERED_TEMPLATE_TYPES:
            supported = ", ".join(sorted(RENDERED_TEMPLATE_TYPES))
            problems.append(
                f"spec.templates[{index}].type: opbroker does not render {kind!r} templates (supported: {supported})"
            )
        elif kind == TemplateType.HELM.value and template.get("action") not in HELM_ACTIONS:
            problems.append(
                f"spec.templates[{index}]: a helm chart renders objects (provision, bind, unbind), "
                f"not {template.get('action')!r}"
            )
    return problems


def schema_problems(props: Mapping[str, Any]) -> list[str]:
    """Parameter schemas of an SFPlan that are not valid JSON Schema (by their own ``$schema`` draft)."""
    spec = props.get("spec")
    schemas = spec.get("schemas") if isinstance(spec, Mapping) else None
    if not isinstance(schemas, Mapping):
        return []
    problems = []
    for group, operation in SCHEMA_PATHS:
        section = schemas.get(group)
        holder = section.get(operation) if isinstance(section, Mapping) else None
        schema = holder.get("parameters") if isinstance(holder, Mapping) else None
        if schema is None:
            continue
        path = f"spec.schemas.{group}.{operation}.parameters"
        if isinstance(schema, bool):
            continue  # true and false are JSON Schemas (everything valid, nothing valid)
        if not isinstance(schema, Mapping):
            problems.append(f"{path}: a JSON Schema must be an object")
            continue
        validator = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        try:
            validator.check_schema(dict(schema))
        except jsonschema.SchemaError as exc:
            where = "".join(f"[{p!r}]" for p in exc.path)
            problems.append(f"{path}{where}: not a valid JSON Schema: {exc.message}")
    return problems


def rbac_problems(props: Mapping[str, Any]) -> list[str]:
    """RBAC rules of a Role or ClusterRole that grant ``*`` verbs on ``*`` resources."""
    rules = props.get("rules") or []
    return [
        f"rules[{index}]: grants '*' verbs on '*' resources (apiGroups {list(rule.get('apiGroups') or [])})"
        for index, rule in enumerate(rules)
        if isinstance(rule, Mapping) and rbac.grants_everything(rule)
    ]


def plain(value: Any) -> Any:
    """``value`` as plain dicts and lists. Under the engine, ``args.props`` are pulumi_policy's read-only
    ``_DictProxy``/``_ListProxy`` (Mapping/Sequence, not dict/list): jsonschema refuses them as schemas."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return [plain(v) for v in value]
    return value


def _report(args: ResourceValidationArgs, report_violation: ReportViolation, problems: list[str]) -> None:
    for problem in problems:
        report_violation(f"{args.name}: {problem}", None)


def validate_plan(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
    if args.resource_type == SFPLAN_TYPE:
        _report(args, report_violation, plan_problems(plain(args.props)))


def validate_parameter_schemas(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
    if args.resource_type == SFPLAN_TYPE:
        _report(args, report_violation, schema_problems(plain(args.props)))


def validate_rbac(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
    if args.resource_type in RBAC_TYPES:
        _report(args, report_violation, rbac_problems(plain(args.props)))


PLAN_VALID = ResourceValidationPolicy(
    name="opbroker-plan-valid",
    description="SFPlans fit the opbroker resource model and use only template types opbroker renders.",
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=validate_plan,
)
PARAMETER_SCHEMAS_VALID = ResourceValidationPolicy(
    name="opbroker-parameter-schemas-valid",
    description="SFPlan parameter schemas are valid JSON Schema.",
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=validate_parameter_schemas,
)
NO_WILDCARD_RBAC = ResourceValidationPolicy(
    name="opbroker-no-wildcard-rbac",
    description="No Role or ClusterRole grants '*' verbs on '*' resources.",
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=validate_rbac,
)

#: Every policy of the pack, in the order they are reported.
POLICIES: list[Policy] = [PLAN_VALID, PARAMETER_SCHEMAS_VALID, NO_WILDCARD_RBAC]
