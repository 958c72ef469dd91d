"""One RBAC PolicyRule as plain data, and the check every declared rule passes (no ``*`` verbs on ``*``
resources, nothing empty).

Apart from :mod:`opbroker.api.rbac` (which builds the control plane's rules from the resource model) so the
resource model itself — an SFCluster's ``spec.controller.operatorRules`` — can check its rules with the very
function the ControlPlane component and the policy pack use, without importing the model it is part of.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

WILDCARD = "*"
#: Why a rule granting everything is refused, wherever it is declared.
EVERYTHING_REFUSED = "grants '*' verbs on '*' resources; name the operator kinds and verbs instead"


@dataclass(frozen=True)
class Rule:
    """One PolicyRule of a Role or ClusterRole."""

    api_groups: tuple[str, ...]
    resources: tuple[str, ...]
    verbs: tuple[str, ...]
    resource_names: tuple[str, ...] = ()

    def to_manifest(self) -> dict[str, Any]:
        """The rule as the API server spells it (camelCase, no empty resourceNames)."""
        rule: dict[str, Any] = {
            "apiGroups": list(self.api_groups),
            "resources": list(self.resources),
            "verbs": list(self.verbs),
        }
        if self.resource_names:
            rule["resourceNames"] = list(self.resource_names)
        return rule

    @classmethod
    def from_args(cls, args: Mapping[str, Any]) -> "Rule":
        """A rule from component args (snake_case) or a manifest (camelCase)."""

        def field(snake: str, camel: str) -> tuple[str, ...]:
            value = args.get(snake, args.get(camel)) or ()
            return tuple(str(v) for v in value)

        return cls(
            api_groups=field("api_groups", "apiGroups"),
            resources=field("resources", "resources"),
            verbs=field("verbs", "verbs"),
            resource_names=field("resource_names", "resourceNames"),
        )


def grants_everything(rule: Mapping[str, Any] | Rule) -> bool:
    """Whether a rule grants every verb on every resource (``*`` on ``*``), whatever its groups."""
    parsed = rule if isinstance(rule, Rule) else Rule.from_args(rule)
    return WILDCARD in parsed.verbs and WILDCARD in parsed.resources


def rule_problems(rules: Sequence[Mapping[str, Any]], path: str) -> list[tuple[str, str]]:
    """(field path, reason) for every extra rule that is empty or grants ``*`` on ``*``."""
    problems = []
    for index, raw in enumerate(rules):
        rule = Rule.from_args(raw)
        where = f"{path}[{index}]"
        if not rule.resources:
            problems.append((f"{where}.resources", "at least one resource is required"))
        if not rule.verbs:
            problems.append((f"{where}.verbs", "at least one verb is required"))
        if grants_everything(rule):
            problems.append((where, EVERYTHING_REFUSED))
    return problems
