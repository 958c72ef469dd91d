"""The controller's entry point: render a plan's template for an action into objects, refs, status or a selector.

A :class:`Renderer` is created once and shared: it holds the sandboxed environments, compiled templates
(cached by content hash, so each template is compiled once however many instances use it) and the URL cache.
Every render gets its own state (budget, slots, registry), so concurrent renders on different threads do not
interact. Nothing here touches a cluster: inputs are plain dicts as read from the API server, outputs are
plain dicts and small frozen values, and the controller does the applying.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import zlib
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, TypeVar

from jinja2 import Template, TemplateNotFound, TemplateSyntaxError, UndefinedError
from jinja2.exceptions import SecurityError

from opbroker.api.catalog import SFPlan, TemplateAction, TemplateSpec, TemplateType
from opbroker.api.meta import ResourceRef
from opbroker.rendering import (
    couchbase,
    functions,
    goengine,
    interpolation,
    loading,
    output,
    registry,
    state,
    status,
)
from opbroker.rendering.environment import PlanEnvironment
from opbroker.rendering.errors import RenderError, RenderLimitError, TemplateSecurityError, TemplateSourceError
from opbroker.rendering.limits import Budget, Limits

T = TypeVar("T")

#: Actions whose templates render Kubernetes objects to apply.
OBJECT_ACTIONS = frozenset({TemplateAction.PROVISION, TemplateAction.BIND, TemplateAction.UNBIND})
#: Template variables that a ``sources`` entry must not hide.
RESERVED_VARIABLES = frozenset(
    {"service", "plan", "instance", "binding", "sources", "range"} | set(functions.FUNCTIONS)
)
#: Actions a helm chart can render (as in Service Fabrik: a chart renders objects, never sources or status).
HELM_ACTIONS = OBJECT_ACTIONS
#: What a value interpolated into a label selector may contain: a label value's characters, nothing that
#: could add a requirement (``,``), an operator (``=``, ``!``) or a set (``(``).
_SELECTOR_VALUE = re.compile(r"[A-Za-z0-9._/-]*")


@dataclass(frozen=True, kw_only=True)
class RenderInputs:
    """Everything a template may see, as plain dicts exactly as on the wire (camelCase, metadata/spec/status).

    ``sources`` maps each name of the rendered ``sources`` template to the live object, or None when it does
    not exist (it is then simply absent from the template's variables). ``registry`` is the instance
    registry as stored (empty for a new instance) and ``binding_registry`` the binding's (None for a new
    binding: it is then created from the instance registry). Namespaces: a template's own
    ``metadata.namespace`` wins, then ``context_namespace`` (from the request context), then
    ``default_namespace`` (the controller's). Request data can hold secrets (parameters, live Secrets,
    registries), so only the namespaces appear in ``repr``.
    """

    instance: Mapping[str, Any] = field(repr=False)
    default_namespace: str
    context_namespace: str | None = None
    service: Mapping[str, Any] | None = field(default=None, repr=False)
    plan: Mapping[str, Any] | None = field(default=None, repr=False)
    """The plan as on the wire; None means ``plan_model.to_manifest()`` (computed once per plan object)."""
    binding: Mapping[str, Any] | None = field(default=None, repr=False)
    sources: Mapping[str, Mapping[str, Any] | None] = field(default_factory=dict, repr=False)
    registry: Mapping[str, Any] = field(default_factory=dict, repr=False)
    binding_registry: Mapping[str, Any] | None = field(default=None, repr=False)

    @property
    def namespace(self) -> str:
        """Where objects without an explicit namespace go."""
        return self.context_namespace or self.default_namespace


@dataclass(frozen=True)
class Rendered:
    """The objects an object action wants applied, and the registries to persist afterwards.

    ``registry`` is the instance registry, ``binding_registry`` the binding's (bind/unbind only). Values
    generated during the render are in them; persisting them is what makes the next render identical.
    """

    objects: tuple[output.RenderedObject, ...]
    registry: dict[str, Any] = field(repr=False)
    binding_registry: dict[str, Any] | None = field(default=None, repr=False)


def _spec_field(obj: Mapping[str, Any] | None, name: str) -> Any:
    spec = (obj or {}).get("spec")
    return spec.get(name) if isinstance(spec, Mapping) else None


def _template_line(traceback: TracebackType | None, label: str) -> tuple[int | None, str | None]:
    """The line of the innermost template frame in a (Jinja-rewritten) traceback, and its snippet if any."""
    line, snippet = None, None
    while traceback is not None:
        filename = traceback.tb_frame.f_code.co_filename
        if filename == label:
            line, snippet = traceback.tb_lineno, None
        elif filename.startswith("snippet "):
            line, snippet = traceback.tb_lineno, filename
        traceback = traceback.tb_next
    return line, snippet


class Renderer:
    """Renders plan templates. Reusable and thread-safe; create one per process.

    ``fetcher`` fetches ``url`` templates (default: :class:`loading.HttpFetcher`); ``limits`` bounds every
    render (:class:`limits.Limits`); ``max_templates`` bounds the compiled-template cache. ``go`` renders
    ``gotemplate`` and ``helm`` templates (default: a :class:`goengine.GoEngine`, whose process starts on the
    first such render, so a renderer that only sees jinja2 plans never starts it).
    """

    def __init__(
        self,
        *,
        fetcher: loading.Fetcher | None = None,
        limits: Limits | None = None,
        max_templates: int = 512,
        go: goengine.GoEngine | None = None,
    ) -> None:
        self.limits = limits or Limits()
        self.go = go or goengine.GoEngine(self.limits)
        self._texts = loading.TemplateTexts(fetcher or loading.HttpFetcher(), self.limits)
        self._max_templates = max_templates
        self._lock = threading.Lock()
        self._environments: OrderedDict[str, PlanEnvironment] = OrderedDict()
        self._templates: OrderedDict[tuple[str, str, str], Template] = OrderedDict()
        self._plan_manifests: OrderedDict[int, tuple[SFPlan, dict[str, Any]]] = OrderedDict()
        self._parsed = output.ParsedTexts()

    # -- public API ---------------------------------------------------------------------------------------------

    def render_objects(self, plan: SFPlan, action: TemplateAction, inputs: RenderInputs) -> Rendered:
        """Render ``provision``, ``bind`` or ``unbind`` into the objects to apply.

        A plan without a template for the action renders no objects. Generated values (passwords, keys,
        certificates) come back in the registries; bind/unbind write to the binding registry, creating it
        from the instance registry when ``inputs.binding_registry`` is None.
        """
        if action not in OBJECT_ACTIONS:
            raise RenderError(f"render_objects renders provision, bind or unbind, not {action.value!r}")
        if action is not TemplateAction.PROVISION and inputs.binding is None:
            raise RenderError(
                f"the {action.value} template needs a binding", plan=self._name(plan), action=action.value
            )
        instance_registry = self._instance_registry(inputs)
        if action is TemplateAction.PROVISION:
            work = registry.Registry(instance_registry, writable=True, max_bytes=self.limits.max_output_bytes)
            parameters = _spec_field(inputs.instance, "parameters")
        else:
            work = registry.Registry(
                self._binding_registry(inputs, instance_registry),
                writable=True,
                max_bytes=self.limits.max_output_bytes,
            )
            parameters = _spec_field(inputs.binding, "parameters")
        spec = plan.spec.template(action)
        objects: tuple[output.RenderedObject, ...] = ()
        if spec is not None and spec.type is TemplateType.COUCHBASE:
            objects = self._render_couchbase(plan, spec, inputs, work, parameters)
        elif spec is not None:

            def parse(text: str, current: state.RenderState) -> tuple[output.RenderedObject, ...]:
                documents = output.prune_all(
                    output.parse_documents(text, current, self._parsed), limit=self.limits.max_output_bytes
                )
                return output.objects(documents, namespace=inputs.namespace, singleton=spec.singleton, adopt=spec.adopt)

            objects = self._render(plan, spec, inputs, work, parameters, parse)
        try:
            objects = output.confine(objects, allowed=frozenset((inputs.namespace, *(plan.spec.namespaces or ()))))
            objects = output.bounded(objects, limit=self.limits.max_objects)
        except RenderError as exc:
            raise exc.located(plan=self._name(plan), action=action.value) from None
        if action is TemplateAction.PROVISION:
            return Rendered(objects=objects, registry=work.snapshot())
        return Rendered(objects=objects, registry=instance_registry, binding_registry=work.snapshot())

    def render_sources(self, plan: SFPlan, inputs: RenderInputs) -> dict[str, ResourceRef]:
        """Render the ``sources`` map: which live objects the other templates read (name → reference).

        The names become template variables, so each must not hide a built-in variable or function.
        """

        def parse(text: str, current: state.RenderState) -> dict[str, ResourceRef]:
            refs = output.refs(self._single(text, current, "sources"), namespace=inputs.namespace)
            output.bounded(refs, limit=self.limits.max_objects, what="sources")
            hidden = sorted(set(refs) & RESERVED_VARIABLES)
            if hidden:
                raise RenderError(f"sources entries {hidden} would hide template variables or functions; rename them")
            return refs

        return self._observe(plan, TemplateAction.SOURCES, inputs, parse) or {}

    def render_status(self, plan: SFPlan, inputs: RenderInputs) -> status.StatusResult:
        """Render the ``status`` template against the live sources into typed section states."""
        result = self._observe(
            plan, TemplateAction.STATUS, inputs, lambda text, cur: status.parse(self._single(text, cur, "status"))
        )
        return result or status.StatusResult()

    def render_cluster_selector(self, plan: SFPlan, inputs: RenderInputs) -> str | None:
        """Render the ``clusterSelector`` template into a label selector over SFCluster labels, or None.

        Non-empty lines are joined with commas. Interpolated values may only hold label-value characters,
        so a parameter cannot add a requirement to the selector.
        """
        selector = self._observe(plan, TemplateAction.CLUSTER_SELECTOR, inputs, _selector)
        return selector or None

    def compile(self, plan: SFPlan, template: TemplateSpec) -> None:
        """Compile one template of ``plan`` (syntax and source checks), as the first render would."""
        if template.type is not TemplateType.JINJA2:
            label = loading.label(template)
            try:
                self._check_go(template, label, plan)
            except RenderError as exc:
                raise self._located(exc, plan, template.action, label) from exc
            return
        label = template.action.value
        try:
            self._template(plan, template, label)
        except RenderError:
            raise
        except Exception as exc:
            raise self._located(exc, plan, template.action, label) from exc

    # -- the render itself --------------------------------------------------------------------------------------

    def _observe(
        self,
        plan: SFPlan,
        action: TemplateAction,
        inputs: RenderInputs,
        parse: Callable[[str, state.RenderState], T],
    ) -> T | None:
        """Render a read-only action (sources, status, clusterSelector): nothing may be generated."""
        spec = plan.spec.template(action)
        if spec is None:
            return None
        instance_registry = self._instance_registry(inputs)
        if inputs.binding is not None:
            values = self._binding_registry(inputs, instance_registry)
            parameters = _spec_field(inputs.binding, "parameters")
        else:
            values, parameters = instance_registry, _spec_field(inputs.instance, "parameters")
        return self._render(plan, spec, inputs, registry.Registry(values, writable=False), parameters, parse)

    def _render(
        self,
        plan: SFPlan,
        spec: TemplateSpec,
        inputs: RenderInputs,
        work: registry.Registry,
        parameters: Any,
        parse: Callable[[str, state.RenderState], T],
    ) -> T:
        label = loading.label(spec)
        try:
            if spec.type is not TemplateType.JINJA2:
                self.go.start()  # a first-use build or start must not count against the render's time
            current = state.RenderState(
                budget=Budget(self.limits),
                registry=work,
                parameters=parameters if isinstance(parameters, Mapping) else {},
            )
            variables = self._variables(plan, inputs)
            with state.active(current):
                if spec.type is TemplateType.JINJA2:
                    text = self._text(self._template(plan, spec, label), variables, current)
                else:
                    current.verbatim = True
                    text = self._go_text(spec, variables, inputs)
                result = parse(text, current)
                current.budget.check_time()
            return result
        except Exception as exc:
            raise self._located(exc, plan, spec.action, label) from exc

    def _render_couchbase(
        self, plan: SFPlan, spec: TemplateSpec, inputs: RenderInputs, work: registry.Registry, parameters: Any
    ) -> tuple[output.RenderedObject, ...]:
        """Render a ``couchbase`` template: each dynamic attribute is evaluated by the Go renderer (Couchbase's
        functions are Go template functions there); registry entries and generated values land in ``work``."""
        label = loading.label(spec)
        try:
            self.go.start()
            configuration = couchbase.parse(self._texts.text(spec), action=spec.action.value)
            values = couchbase.request(
                configuration,
                values=work.snapshot(),
                parameters=parameters,
                snippet_templates=couchbase.snippets(plan.spec.snippets),
            )
            budget = Budget(self.limits)
            text = self.go.render_couchbase(name=spec.action.value, values=values)
            objects = couchbase.result(
                text, work, namespace=inputs.namespace, singleton=spec.singleton, adopt=spec.adopt
            )
            budget.check_time()
            return objects
        except Exception as exc:
            raise self._located(exc, plan, spec.action, label) from exc

    def _text(self, template: Template, variables: dict[str, Any], current: state.RenderState) -> str:
        limit = self.limits.max_output_bytes
        size = 0
        chunks = []
        for chunk in template.generate(variables):
            size += len(chunk)
            if size > limit:
                raise RenderLimitError(f"the rendered text is larger than the limit of {limit} bytes")
            current.budget.tick()
            chunks.append(chunk)
        return "".join(chunks)

    def _go_text(self, spec: TemplateSpec, variables: dict[str, Any], inputs: RenderInputs) -> str:
        """Render a gotemplate or helm template in the Go renderer; its text goes through the same YAML path.

        The variables are Service Fabrik's: a variable whose object does not exist (no binding yet, a source
        not found) is absent rather than null, so ``with .binding.metadata.name`` works as it does there.
        """
        values = {name: value for name, value in variables.items() if value is not None and name != "sources"}
        shared: dict[str, Any] = {name: values.pop(name) for name in ("plan", "service") if name in values}
        name = spec.action.value
        if spec.type is TemplateType.GOTEMPLATE:
            return self.go.render_template(name=name, template=self._texts.text(spec), values=values, shared=shared)
        self._helm_action(spec)
        return self.go.render_chart(
            name=name,
            chart=self._texts.chart(spec),
            values_template=self._texts.values_template(spec),
            values=values,
            release=release_name(inputs.instance),
            namespace=inputs.namespace,
            shared=shared,
        )

    def _check_go(self, spec: TemplateSpec, label: str, plan: SFPlan) -> None:
        if spec.type is TemplateType.COUCHBASE:
            configuration = couchbase.parse(self._texts.text(spec), action=spec.action.value)
            request = couchbase.request(
                configuration, values={}, parameters=None, snippet_templates=couchbase.snippets(plan.spec.snippets)
            )
            self.go.check_couchbase(name=spec.action.value, values=request)
        elif spec.type is TemplateType.HELM:
            self._helm_action(spec)
            chart = self._texts.chart(spec) if spec.url is None else None
            values = self._texts.values_template(spec)
            self.go.check(engine="helm", name=spec.action.value, template=values, chart=chart)
        else:
            self.go.check(engine="gotemplate", name=spec.action.value, template=self._texts.text(spec))

    @staticmethod
    def _helm_action(spec: TemplateSpec) -> None:
        if spec.action not in HELM_ACTIONS:
            raise TemplateSourceError(
                f"a helm chart renders objects (provision, bind, unbind), not {spec.action.value}; "
                "write this template as gotemplate or jinja2"
            )

    def _pruned(self, document: Any) -> Any:
        return output.prune(document, limit=self.limits.max_output_bytes)

    def _single(self, text: str, current: state.RenderState, what: str) -> Any:
        documents = [d for d in output.parse_documents(text, current, self._parsed) if d is not None]
        if len(documents) > 1:
            raise RenderError(f"the {what} template must render one YAML document, got {len(documents)}")
        return self._pruned(documents[0]) if documents else None

    def _variables(self, plan: SFPlan, inputs: RenderInputs) -> dict[str, Any]:
        live = {name: obj for name, obj in inputs.sources.items() if obj is not None}
        hidden = sorted(set(live) & RESERVED_VARIABLES)
        if hidden:
            raise RenderError(f"sources {hidden} would hide template variables or functions; rename them")
        return {
            **live,
            "service": inputs.service,
            "plan": inputs.plan if inputs.plan is not None else self._plan_manifest(plan),
            "instance": inputs.instance,
            "binding": inputs.binding,
            "sources": live,
        }

    # -- registries ---------------------------------------------------------------------------------------------

    def _instance_registry(self, inputs: RenderInputs) -> dict[str, Any]:
        """The stored registry with the read-only and reserved keys recomputed from the request."""
        return {**inputs.registry, **registry.instance_registry(inputs.instance, namespace=inputs.namespace)}

    def _binding_registry(self, inputs: RenderInputs, instance_registry: dict[str, Any]) -> dict[str, Any]:
        """The stored binding registry, or a new one inheriting the instance's keys (Couchbase's rule)."""
        assert inputs.binding is not None
        fresh = registry.binding_registry(instance_registry, inputs.binding)
        if inputs.binding_registry is None:
            return fresh
        own = {k: fresh[k] for k in (registry.BINDING_ID, registry.CONTEXT, registry.PARAMETERS)}
        return {**inputs.binding_registry, **own}

    # -- caches -------------------------------------------------------------------------------------------------

    def _template(self, plan: SFPlan, spec: TemplateSpec, label: str) -> Template:
        text = self._texts.text(spec)
        env_key, environment = self._environment(plan.spec.snippets)
        key = (env_key, label, hashlib.sha256(text.encode("utf-8")).hexdigest())
        with self._lock:
            template = self._templates.get(key)
            if template is not None:
                self._templates.move_to_end(key)
                return template
        code = environment.compile(text, name=label, filename=label)
        template = environment.template_class.from_code(environment, code, environment.make_globals(None), None)
        with self._lock:
            self._templates[key] = template
            while len(self._templates) > self._max_templates:
                self._templates.popitem(last=False)
        return template

    def _environment(self, snippets: Mapping[str, str] | None) -> tuple[str, PlanEnvironment]:
        key = hashlib.sha256(json.dumps(snippets or {}, sort_keys=True).encode("utf-8")).hexdigest()
        with self._lock:
            environment = self._environments.get(key)
            if environment is None:
                environment = self._environments[key] = PlanEnvironment(snippets)
                while len(self._environments) > max(8, self._max_templates // 8):
                    self._environments.popitem(last=False)
            return key, environment

    def _plan_manifest(self, plan: SFPlan) -> dict[str, Any]:
        with self._lock:
            cached = self._plan_manifests.get(id(plan))
            if cached is not None and cached[0] is plan:
                return cached[1]
        manifest = plan.to_manifest()
        with self._lock:
            self._plan_manifests[id(plan)] = (plan, manifest)  # holding `plan` keeps its id from being reused
            while len(self._plan_manifests) > 64:
                self._plan_manifests.popitem(last=False)
        return manifest

    # -- errors -------------------------------------------------------------------------------------------------

    @staticmethod
    def _name(plan: SFPlan) -> str:
        return plan.metadata.name or plan.spec.name

    def _located(self, exc: Exception, plan: SFPlan, action: TemplateAction, label: str) -> RenderError:
        line, snippet = _template_line(exc.__traceback__, label)
        template = f"{label} via {snippet}" if snippet else label
        error: RenderError
        if isinstance(exc, RenderError):
            error = exc
            if exc.source and exc.source != action.value:
                template = f"{label} via {exc.source}"
        elif isinstance(exc, SecurityError):
            error = TemplateSecurityError(f"blocked by the sandbox: {exc}")
        elif isinstance(exc, TemplateSyntaxError):
            line = exc.lineno
            if exc.filename and exc.filename != label:
                template = f"{label} via {exc.filename}"
            error = RenderError(f"syntax error: {exc.message}")
        elif isinstance(exc, TemplateNotFound):
            known = sorted(plan.spec.snippets or {})
            error = RenderError(f"snippet {exc.name!r} not found; the plan's snippets are {known}")
        elif isinstance(exc, UndefinedError):
            error = RenderError(f"undefined: {exc.message}")
        elif isinstance(exc, RecursionError):
            error = RenderLimitError("the template nests too deeply (recursive macro or deeply nested data)")
        elif isinstance(exc, MemoryError):
            error = RenderLimitError("the template ran out of memory")
        else:
            error = RenderError(f"{type(exc).__name__}: {exc}")
        return error.located(plan=self._name(plan), action=action.value, template=template, line=line)


def release_name(instance: Mapping[str, Any]) -> str:
    """A helm release's name for an instance, as Service Fabrik derives it: ``in-`` and the Adler-32 sum of
    the instance's name in decimal (short, stable, a valid name whatever the instance is called)."""
    name = str((instance.get("metadata") or {}).get("name") or "")
    return f"in-{zlib.adler32(name.encode('utf-8'))}"


def _selector(text: str, current: state.RenderState) -> str:
    for value in current.slots:
        if not _SELECTOR_VALUE.fullmatch(interpolation.as_text(value)):
            raise RenderError(
                "a value interpolated into the cluster selector holds characters a label value cannot "
                "(only letters, digits, '.', '_', '-' and '/' are allowed)"
            )
    lines = [line.strip() for line in interpolation.substitute_text(text, current).splitlines()]
    return ",".join(line for line in lines if line and not line.startswith("#"))
