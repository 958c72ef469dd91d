"""Reading manifests: split multi-document YAML and validate each document owned by opbroker.

Every document gets a verdict (valid, skipped, or the fields at fault), so one bad document does not hide
the problems of the next. Only a file that is not YAML at all fails as a whole.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from opbroker.api.errors import ManifestError, field_errors
from opbroker.api.meta import KubeResource
from opbroker.api.registry import model_for


@dataclass(frozen=True)
class Checked:
    """The verdict on one document: the parsed resource, why it was skipped, or what is wrong with it."""

    source: str
    document: int
    kind: str
    resource: KubeResource | None = None
    skipped_reason: str | None = None
    problems: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.problems

    def error(self) -> ManifestError:
        return ManifestError(self.source, self.document, self.kind, self.problems)


def load_documents(text: str, source: str = "<string>") -> list[tuple[int, Any]]:
    """Every non-empty YAML document in ``text`` with its 1-based position in the file."""
    try:
        documents = list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        raise ManifestError(source, 0, "?", (f"not valid YAML: {exc}",)) from exc
    return [(index, doc) for index, doc in enumerate(documents, start=1) if doc is not None]


def check_document(doc: Any, source: str = "<string>", index: int = 1) -> Checked:
    """Validate one document against its model; documents of kinds opbroker does not own are skipped."""
    if not isinstance(doc, dict):
        return Checked(source, index, "?", problems=(f"expected a mapping, got {type(doc).__name__}",))
    api_version, kind = doc.get("apiVersion"), doc.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind, str):
        return Checked(source, index, "?", problems=("apiVersion and kind are required strings",))
    model = model_for(api_version, kind)
    if model is None:
        return Checked(source, index, kind, skipped_reason=f"{api_version} {kind} is not an opbroker kind")
    try:
        return Checked(source, index, kind, resource=model.model_validate(doc))
    except ValidationError as exc:
        return Checked(source, index, kind, problems=tuple(field_errors(exc)))


def check_text(text: str, source: str = "<string>") -> list[Checked]:
    return [check_document(doc, source, index) for index, doc in load_documents(text, source)]


def check_file(path: Path) -> list[Checked]:
    """All documents of a file, each with its verdict. Raises ManifestError only for unreadable YAML."""
    return check_text(path.read_text(encoding="utf-8"), str(path))


def load_resources(text: str, source: str = "<string>") -> list[KubeResource]:
    """The opbroker resources in ``text``; the first invalid document raises ManifestError."""
    resources = []
    for checked in check_text(text, source):
        if not checked.ok:
            raise checked.error()
        if checked.resource is not None:
            resources.append(checked.resource)
    return resources
