"""From rendered text to data: parse the YAML, resolve interpolations, prune nulls, check the objects.

Parsing happens *before* any value is put in (see :mod:`interpolation`), so the structure of every document
is the template author's. Then:

* **Pruning** (Couchbase's rule, without its bug): every mapping entry and list item that is null is
  removed, at any depth, in one functional pass that builds new containers, so no entry can be skipped
  the way an in-place deletion loop skips its neighbour. Empty mappings that remain are kept.
* **Objects** (``provision``/``bind``/``unbind``): each document must be a Kubernetes object with
  ``apiVersion``, ``kind`` and ``metadata.name``; errors name the document (1-based) and the field.
* **Namespaces**: the template's ``metadata.namespace`` wins; otherwise the request context's namespace;
  otherwise the controller's default. Kinds known to be cluster-scoped (:data:`CLUSTER_SCOPED_KINDS`) get none.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping, Sized
from dataclasses import dataclass, field
from typing import Any, TypeVar

import yaml
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, ScalarNode

from opbroker.api.conventions import ANNOTATION_SINGLETON
from opbroker.api.meta import ResourceRef
from opbroker.rendering import interpolation, state
from opbroker.rendering.errors import RenderError, RenderLimitError

#: Core kinds that are cluster-scoped, so no namespace is stamped on them. Any other kind (custom resources
#: included) is treated as namespaced; the renderer has no cluster to ask. For a cluster-scoped custom
#: resource the API server clears a stray namespace on apply, and the controller, which has discovery, can
#: drop it from the recorded reference.
CLUSTER_SCOPED_KINDS = frozenset(
    {
        "Namespace",
        "Node",
        "PersistentVolume",
        "ClusterRole",
        "ClusterRoleBinding",
        "CustomResourceDefinition",
        "StorageClass",
        "PriorityClass",
        "IngressClass",
        "RuntimeClass",
        "CSIDriver",
        "APIService",
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    }
)

_Base: type[Any] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_Base):  # type: ignore[misc]
    """YAML 1.1 safe loading, plus: interpolation markers resolved in every scalar, duplicate keys refused,
    timestamps kept as strings (Kubernetes wants them as text), mapping keys always strings."""

    current: state.RenderState

    reusable: bool = True
    """False once a mapping key held a marker: resolved while parsing, it is this render's alone."""

    def construct_yaml_str(self, node: ScalarNode) -> Any:
        text = self.construct_scalar(node)
        nonce = self.current.nonce
        if nonce not in text.lower():
            return text
        return _Deferred(text.replace(nonce, _HOLE), plain_style=not node.style)

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[str, Any]:
        if not isinstance(node, MappingNode):
            raise ConstructorError(None, None, f"expected a mapping node, but found {node.id}", node.start_mark)
        explicit = len(node.value)
        self.flatten_mapping(node)
        merged = len(node.value) - explicit  # entries from `<<` merge keys come first and may be overridden
        mapping: dict[str, Any] = {}
        seen: set[str] = set()
        for position, (key_node, value_node) in enumerate(node.value):
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, _Deferred):
                key = key.resolve(self.current)
                self.reusable = False
            if isinstance(key, Mapping | list) or key is None:
                raise ConstructorError(
                    "while constructing a mapping", node.start_mark, "a key must be a string", key_node.start_mark
                )
            key = interpolation.as_text(key)
            if position >= merged:
                if key in seen:
                    raise ConstructorError(
                        "while constructing a mapping", node.start_mark, f"duplicate key {key!r}", key_node.start_mark
                    )
                seen.add(key)
            mapping[key] = self.construct_object(value_node, deep=deep)
        return mapping


_Loader.add_constructor("tag:yaml.org,2002:str", _Loader.construct_yaml_str)
_Loader.add_constructor("tag:yaml.org,2002:timestamp", _Loader.construct_yaml_str)


def parse_documents(text: str, current: state.RenderState, parsed: ParsedTexts | None = None) -> list[Any]:
    """Every YAML document of the rendered text, with interpolations resolved (empty documents are None).

    ``parsed``: texts parsed before, by their shape (see :class:`ParsedTexts`); a text of the same shape is
    not parsed again, only its scalars with markers are resolved against this render's values.
    """
    if parsed is None or current.verbatim or _HOLE in text:
        skeletons, _ = _parse(text, current)
    else:
        shape = text.replace(current.nonce, _HOLE)
        kept = parsed.get(shape)
        if kept is None:
            skeletons, reusable = _parse(text, current)
            if reusable:
                parsed.put(shape, skeletons)
        else:
            skeletons = kept
    return [_materialize(skeleton, current, {}) for skeleton in skeletons]


def _parse(text: str, current: state.RenderState) -> tuple[tuple[Any, ...], bool]:
    """The documents of ``text`` with each scalar holding markers left :class:`_Deferred`, and whether they may
    serve another render of the same shape."""
    loader = _Loader(text)
    loader.current = current
    try:
        documents = []
        while loader.check_data():
            documents.append(loader.get_data())
            current.budget.check_time()
        return tuple(documents), loader.reusable
    except yaml.YAMLError as exc:
        raise RenderError(f"the rendered text is not valid YAML: {_yaml_problem(exc, text, current)}") from None
    finally:
        loader.dispose()


def _materialize(value: Any, current: state.RenderState, copies: dict[int, Any]) -> Any:
    """``value`` with every :class:`_Deferred` scalar resolved against ``current``, in containers of its own (the
    parse's are kept for the next render). ``copies``: what was made of each container and scalar already, by
    identity — a YAML alias is the same object as its anchor, and stays one (an alias bomb is not expanded
    here; the pruning's size bound refuses it as before)."""
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    if id(value) in copies:
        return copies[id(value)]
    if isinstance(value, _Deferred):
        resolved = copies[id(value)] = value.resolve(current)
        return resolved
    if isinstance(value, dict):
        mapping: dict[Any, Any] = {}
        copies[id(value)] = mapping
        for key, item in value.items():
            mapping[key] = _materialize(item, current, copies)
        return mapping
    if isinstance(value, list):
        items: list[Any] = []
        copies[id(value)] = items
        items.extend(_materialize(item, current, copies) for item in value)
        return items
    if isinstance(value, tuple):  # !!omap and !!pairs: (key, value) pairs
        return tuple(_materialize(item, current, copies) for item in value)
    if isinstance(value, set):
        return set(value)
    return value  # bytes (!!binary): immutable


@dataclass(frozen=True, slots=True)
class _Deferred:
    """A scalar that holds interpolation markers, as parsed: its render's nonce replaced by :data:`_HOLE`, so
    any render of the same shape can resolve it against its own values."""

    text: str
    plain_style: bool

    def resolve(self, current: state.RenderState) -> Any:
        text = self.text.replace(_HOLE, current.nonce)
        return interpolation.resolve_scalar(text, plain_style=self.plain_style, current=current)


#: Where the render's nonce stood in a text's shape: a character YAML refuses, so no parsed scalar holds one.
_HOLE = "\x00"


class ParsedTexts:
    """The parse of rendered texts, kept by their shape: the text with the render's nonce taken out.

    Why: parsing the YAML of a render was ~40 % of a render's CPU (py-spy, issue 31), yet renders of one plan
    mostly produce the same text but for their markers — every value is a marker, so a ``sources`` or
    ``status`` text differs between two instances only by the nonce. Safe because a text's structure is its
    template's own characters (values are never in it): the same shape parses the same, and each render's
    values are still put in by :func:`~.interpolation.resolve_scalar` alone. Not kept: a Go template's text (it
    holds the values themselves, credentials included), a text whose mapping keys hold markers (resolved while
    parsing: one render's), and texts larger than :attr:`max_text_bytes`. Bounded by count and by the bytes of
    the texts kept (the parsed documents are a few times that); least recently used go first.
    """

    def __init__(self, *, max_texts: int = 1024, max_text_bytes: int = 64 * 1024, max_bytes: int = 4 * 1024 * 1024):
        self.max_texts = max_texts
        self.max_text_bytes = max_text_bytes
        self.max_bytes = max_bytes
        self._kept: OrderedDict[str, tuple[Any, ...]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, shape: str) -> tuple[Any, ...] | None:
        with self._lock:
            documents = self._kept.get(shape)
            if documents is not None:
                self._kept.move_to_end(shape)
            return documents

    def put(self, shape: str, documents: tuple[Any, ...]) -> None:
        if len(shape) > self.max_text_bytes:
            return
        with self._lock:
            if shape in self._kept:
                return
            self._kept[shape] = documents
            self._bytes += len(shape)
            while len(self._kept) > self.max_texts or self._bytes > self.max_bytes:
                evicted, _ = self._kept.popitem(last=False)
                self._bytes -= len(evicted)

    def __len__(self) -> int:
        return len(self._kept)


def _yaml_problem(exc: yaml.YAMLError, text: str, current: state.RenderState) -> str:
    """The parser's complaint and the rendered line it is about, with ``{{...}}`` where values go (the
    rendered line, not the template's: ``{%- %}`` tags remove lines, so the numbers can differ)."""
    problem = getattr(exc, "problem", None) or str(exc)
    context = getattr(exc, "context", None)
    mark = getattr(exc, "problem_mark", None)
    message = f"{context}: {problem}" if context else str(problem)
    if mark is None:
        return message
    if current.verbatim:
        return f"{message}, at line {mark.line + 1} of the rendered text"
    lines = text.splitlines()
    line = lines[mark.line] if 0 <= mark.line < len(lines) else ""
    return f"{message}, at line {mark.line + 1} of the rendered text: {_hide_markers(line, current).strip()!r}"


def _hide_markers(line: str, current: state.RenderState) -> str:
    return state.MARKER.sub(lambda m: "{{...}}" if m.group(1) == current.nonce else m.group(0), line)


@dataclass
class _Walk:
    limit: int
    size: int = 0

    def count(self, amount: int) -> None:
        self.size += amount
        if self.size > self.limit:
            raise RenderLimitError(f"the rendered output is larger than the limit of {self.limit} bytes")


def prune(value: Any, *, limit: int) -> Any:
    """A copy of ``value`` with every null mapping value and null list item removed, at every depth.

    Also bounds the result: ``limit`` is roughly its size in bytes (string lengths plus one per node), so a
    YAML alias bomb in a template is refused instead of expanded.
    """
    return _prune(value, _Walk(limit))


def prune_all(values: list[Any], *, limit: int) -> list[Any]:
    """:func:`prune` for every document of one render, with ``limit`` bounding them together: the output is
    one answer, and many documents each just under the limit are as large as one far over it."""
    walk = _Walk(limit)
    return [_prune(value, walk) for value in values]


def _prune(value: Any, walk: _Walk) -> Any:
    if isinstance(value, dict):
        walk.count(1)
        result = {}
        for key, item in value.items():
            if item is not None:
                walk.count(len(key))
                kept = _prune(item, walk)
                if kept is not None:
                    result[key] = kept
        return result
    if isinstance(value, list):
        walk.count(1)
        return [kept for item in value if item is not None and (kept := _prune(item, walk)) is not None]
    walk.count(len(value) if isinstance(value, str) else 1)
    return value


@dataclass(frozen=True)
class RenderedObject:
    """One Kubernetes object to apply, as a plain dict, and whether its template is a singleton.

    ``singleton``: the object is shared by every instance of the plan; the controller tolerates "already
    exists" and adds an owner reference instead of failing or recreating it.
    """

    manifest: dict[str, Any] = field(repr=False)
    singleton: bool = False
    adopt: bool = False
    """The template adopts an existing object opbroker did not make (see ``TemplateSpec.adopt``)."""

    @property
    def ref(self) -> ResourceRef:
        """How ``status.resources`` records the object."""
        metadata = self.manifest["metadata"]
        return ResourceRef(
            api_version=self.manifest["apiVersion"],
            kind=self.manifest["kind"],
            name=metadata["name"],
            namespace=metadata.get("namespace"),
        )

    def __repr__(self) -> str:
        # Manifests may carry generated secrets: never put their content in a log line.
        ref = self.ref
        where = f"{ref.namespace}/" if ref.namespace else ""
        return f"RenderedObject({ref.api_version} {ref.kind} {where}{ref.name}, singleton={self.singleton})"


def objects(
    documents: list[Any], *, namespace: str, singleton: bool, adopt: bool = False
) -> tuple[RenderedObject, ...]:
    """Check each document is a Kubernetes object and give it its namespace (see the module docstring).

    An object is a singleton when its template is, or when it carries the annotation
    ``opbroker.io/singleton: "true"`` (one template can render shared and per-instance objects side by side).
    """
    rendered = []
    for index, document in enumerate(documents, start=1):
        if document is None:
            continue
        if not isinstance(document, dict):
            raise RenderError(
                f"document {index} is a {type(document).__name__}, not a Kubernetes object "
                "(a mapping with apiVersion, kind and metadata.name)"
            )
        metadata = document.get("metadata")
        missing = [f for f in ("apiVersion", "kind") if not isinstance(document.get(f), str) or not document[f]]
        if not isinstance(metadata, dict) or not isinstance(metadata.get("name"), str) or not metadata["name"]:
            missing.append("metadata.name")
        if missing:
            kind = document.get("kind") if isinstance(document.get("kind"), str) else "object"
            raise RenderError(f"document {index} ({kind}): missing {', '.join(missing)}")
        assert isinstance(metadata, dict)
        if "namespace" not in metadata and document["kind"] not in CLUSTER_SCOPED_KINDS:
            metadata["namespace"] = namespace
        shared = (metadata.get("annotations") or {}).get(ANNOTATION_SINGLETON) == "true"
        rendered.append(RenderedObject(manifest=document, singleton=singleton or shared, adopt=adopt))
    return tuple(rendered)


def confine(rendered: tuple[RenderedObject, ...], *, allowed: frozenset[str]) -> tuple[RenderedObject, ...]:
    """The objects, if every namespaced one is in ``allowed`` (the namespace the instance's objects go to and the
    ones its plan declares, ``SFPlan.spec.namespaces``); else a :class:`RenderError` naming the first outside.
    Cluster-scoped objects are the plan account's rights' business (RBAC), as they always were.

    Every render of objects ends here, whatever the step (provision, update, bind, unbind, previews): the
    namespace a template writes into is a request of the template's, and the template sees tenant-written
    values (parameters, context)."""
    for obj in rendered:
        metadata = obj.manifest["metadata"]
        namespace = metadata.get("namespace")
        if obj.manifest["kind"] in CLUSTER_SCOPED_KINDS or namespace is None or namespace in allowed:
            continue
        raise RenderError(
            f"{obj.manifest['kind']} {metadata['name']!r} would go into namespace {namespace!r}: a plan writes only "
            f"into {', '.join(repr(n) for n in sorted(allowed))} (the instance's namespace and the plan's "
            "spec.namespaces)"
        )
    return rendered


SizedT = TypeVar("SizedT", bound=Sized)


def bounded(rendered: SizedT, *, limit: int, what: str = "objects") -> SizedT:
    """The objects (or ``sources`` entries), if there are at most ``limit``; else a :class:`RenderLimitError`
    saying how many. A per-instance budget (issue 42): a loop over a tenant's list parameter must not make one
    instance thousands of API writes, records and status reads."""
    if len(rendered) > limit:
        raise RenderLimitError(f"the template rendered {len(rendered)} {what}, over the limit of {limit} per render")
    return rendered


def refs(document: Any, *, namespace: str) -> dict[str, ResourceRef]:
    """The ``sources`` map: name → object reference, with the same namespace defaulting as objects."""
    if document is None:
        return {}
    if not isinstance(document, dict):
        raise RenderError(
            f"the sources template must render a mapping of name to reference, got {type(document).__name__}"
        )
    result = {}
    for name, entry in document.items():
        if not isinstance(entry, dict):
            raise RenderError(f"sources entry {name!r}: expected a mapping with apiVersion, kind, name, namespace")
        unknown = sorted(set(entry) - {"apiVersion", "kind", "name", "namespace"})
        missing = [f for f in ("apiVersion", "kind", "name") if not isinstance(entry.get(f), str) or not entry[f]]
        if unknown or missing:
            problems = [f"missing {', '.join(missing)}"] if missing else []
            problems += [f"unknown field(s) {', '.join(unknown)}"] if unknown else []
            raise RenderError(f"sources entry {name!r}: {'; '.join(problems)}")
        ns = entry.get("namespace")
        if ns is not None and not isinstance(ns, str):
            raise RenderError(f"sources entry {name!r}: namespace must be a string")
        if ns is None and entry["kind"] not in CLUSTER_SCOPED_KINDS:
            ns = namespace
        result[name] = ResourceRef(
            api_version=entry["apiVersion"], kind=entry["kind"], name=entry["name"], namespace=ns
        )
    return result
