"""One schema per object (issue 45): the controller's read views are checked against the ``api/`` models.

Each view is built from a body that fills every field its model declares (one value per leaf, one item per list,
derived from the model's JSON schema), wrapped so that every key the view asks for is recorded with its path. A
path the model does not declare is a view reading a field nobody writes or validates: the two descriptions of one
object have drifted. ``apiVersion``, ``kind`` and ``metadata`` are Kubernetes' (the same for every object), and a
free-form map (labels, a context, parameters) may hold any key.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytest
from pydantic import BaseModel

from opbroker.api.catalog import SFPlan, SFService
from opbroker.api.cluster import SFCluster
from opbroker.api.osb import SFServiceBinding, SFServiceInstance
from opbroker.api.primaza import RegisteredService, ServiceClaim
from opbroker.api.servicecatalog import Broker, ServiceClass
from opbroker.controller.claims.core.views import ClaimView, ServiceView
from opbroker.controller.core.views import BindingView, EntryView, InstanceView
from opbroker.controller.multicluster.core.views import ReplicaView, SFClusterView
from opbroker.controller.servicecatalog.core.views import BrokerView, ServiceClassView

Path = tuple[str, ...]
ANY_KEY = "*"
ITEM = "[]"
KUBERNETES = {"apiVersion", "kind", "metadata"}

VIEWS: list[tuple[Callable[[Mapping[str, Any]], object], tuple[type[BaseModel], ...]]] = [
    (InstanceView.of, (SFServiceInstance,)),
    (BindingView.of, (SFServiceBinding,)),
    (EntryView.of, (SFPlan, SFService)),  # one view of both catalog kinds: it may read what either declares
    (SFClusterView.of, (SFCluster,)),
    (ReplicaView.of, (SFServiceInstance, SFServiceBinding)),  # the copies of both kinds in a sister
    (ClaimView.of, (ServiceClaim,)),
    (ServiceView.of, (RegisteredService,)),
    (BrokerView.of, (Broker,)),
    (ServiceClassView.of, (ServiceClass,)),
]


class Recorded(dict[str, Any]):
    """A JSON object that records the path of every key read of it (and of what it holds)."""

    def __init__(self, data: Mapping[str, Any], path: Path, log: set[Path]) -> None:
        super().__init__(data)
        self._path, self._log = path, log

    def _read(self, key: str, value: Any) -> Any:
        path = (*self._path, key)
        self._log.add(path)
        return wrap(value, path, self._log)

    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        return self._read(key, super().get(key, default))

    def __getitem__(self, key: str) -> Any:
        return self._read(key, super().__getitem__(key))

    def items(self) -> Any:  # type: ignore[override]
        return [(key, self._read(key, value)) for key, value in super().items()]

    def values(self) -> Any:  # type: ignore[override]
        return [value for _, value in self.items()]


def wrap(value: Any, path: Path, log: set[Path]) -> Any:
    if isinstance(value, dict):
        return Recorded(value, path, log)
    if isinstance(value, list):
        return [wrap(item, (*path, ITEM), log) for item in value]
    return value


def _resolve(schema: Mapping[str, Any], root: Mapping[str, Any]) -> Mapping[str, Any]:
    while "$ref" in schema:
        schema = root["$defs"][schema["$ref"].rsplit("/", 1)[-1]]
    return schema


def _branches(schema: Mapping[str, Any], root: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    schema = _resolve(schema, root)
    for key in ("anyOf", "oneOf", "allOf"):
        if key in schema:
            return [b for sub in schema[key] for b in _branches(sub, root)]
    return [schema]


def declared(schema: Mapping[str, Any], root: Mapping[str, Any], path: Path = (), depth: int = 0) -> set[Path]:
    """Every path the schema declares (``*``: any key of a free-form map; ``[]``: a list's items)."""
    found: set[Path] = set()
    if depth > 12:
        return found
    for branch in _branches(schema, root):
        for name, sub in (branch.get("properties") or {}).items():
            found.add((*path, name))
            found |= declared(sub, root, (*path, name), depth + 1)
        extra = branch.get("additionalProperties")
        if isinstance(extra, Mapping):
            found.add((*path, ANY_KEY))
            found |= declared(extra, root, (*path, ANY_KEY), depth + 1)
        elif branch.get("type") == "object" and not branch.get("properties") and extra is not False:
            found.add((*path, ANY_KEY))
        if "items" in branch:
            found |= declared(branch["items"], root, (*path, ITEM), depth + 1)
    return found


def filled(schema: Mapping[str, Any], root: Mapping[str, Any], depth: int = 0) -> Any:
    """A value for every field the schema declares (the first branch of a union that is not null)."""
    branches = [b for b in _branches(schema, root) if b.get("type") != "null"] or [{}]
    branch = branches[0]
    if depth > 12:
        return None
    if branch.get("properties"):
        return {name: filled(sub, root, depth + 1) for name, sub in branch["properties"].items()}
    kind = branch.get("type")
    if kind == "array":
        return [filled(branch.get("items") or {}, root, depth + 1)]
    if kind == "object":
        return {"key": "value"}
    if kind == "integer":
        return 1
    if kind == "number":
        return 1.5
    if kind == "boolean":
        return True
    if "enum" in branch:
        return branch["enum"][0]
    return "text"


def covers(allowed: set[Path], path: Path) -> bool:
    """Whether ``path`` is declared, directly or below a free-form map or list of them."""
    if path[0] in KUBERNETES or path in allowed:
        return True
    return any((*path[:i], ANY_KEY) in allowed for i in range(len(path)))


@pytest.mark.parametrize(("view", "models"), VIEWS, ids=lambda p: getattr(p, "__qualname__", None) or "")
def test_a_view_reads_only_what_its_models_declare(
    view: Callable[[Mapping[str, Any]], object], models: tuple[type[BaseModel], ...]
) -> None:
    allowed: set[Path] = set()
    for model in models:
        schema = model.model_json_schema(by_alias=True, mode="validation")
        allowed |= declared(schema, schema)
    for model in models:
        schema = model.model_json_schema(by_alias=True, mode="validation")
        body = filled(schema, schema)
        body.update(apiVersion="v", kind=model.__name__, metadata={"name": "n", "namespace": "ns"})
        log: set[Path] = set()
        view(Recorded(body, (), log))
        assert log, f"{view} read nothing of a {model.__name__}"
        unknown = sorted("/".join(path) for path in log if not covers(allowed, path))
        names = " or ".join(m.__name__ for m in models)
        assert not unknown, f"{view} reads fields {names} do not declare: {unknown}"
