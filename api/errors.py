"""Turning validation failures into messages a person can act on: which file, which document, which field."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import ValidationError


def field_path(loc: tuple[int | str, ...]) -> str:
    """``('spec', 'templates', 2, 'action')`` → ``spec.templates[2].action``."""
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else part
    return path or "(document)"


def field_errors(error: ValidationError) -> list[str]:
    """One ``field: message`` line per problem, with wire (camelCase) field names."""
    lines = []
    for item in error.errors(include_url=False):
        message = item["msg"].removeprefix("Value error, ")
        lines.append(f"{field_path(item['loc'])}: {message}")
    return lines


@dataclass(frozen=True)
class ManifestError(Exception):
    """A document that does not fit the model: where it is, and each field at fault."""

    source: str
    document: int
    kind: str
    problems: tuple[str, ...]

    def __str__(self) -> str:
        head = f"{self.source}: document {self.document} ({self.kind})"
        return "\n".join([head, *(f"  {p}" for p in self.problems)])
