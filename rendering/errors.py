"""The one exception the renderer raises, and its kinds.

Every failure, whether a bad template, a sandbox violation, a limit, an unreachable URL or output that is no
Kubernetes object, surfaces as a :class:`RenderError` whose message names the plan, the action and the
template (and the template line when known) followed by the cause. The controller catches one type and turns
it into a condition/event; the subclasses let it tell a hostile or runaway template from a broken one.
"""

from __future__ import annotations


class RenderError(Exception):
    """A template could not be rendered into what the controller needs.

    Raised bare inside the engine with only ``cause``; the renderer fills in where it happened
    (:meth:`located`) before it leaves the package, so callers always get the full story.
    """

    def __init__(
        self,
        cause: str,
        *,
        plan: str | None = None,
        action: str | None = None,
        template: str | None = None,
        line: int | None = None,
        column: int | None = None,
        source: str | None = None,
    ) -> None:
        self.cause = cause
        self.plan = plan
        self.action = action
        self.template = template
        self.line = line
        self.column = column
        self.source = source
        """The file inside the template the error is in, when it has several (a helm chart's templates)."""
        super().__init__(cause)

    def located(
        self,
        *,
        plan: str | None = None,
        action: str | None = None,
        template: str | None = None,
        line: int | None = None,
    ) -> RenderError:
        """A copy of the same kind with the missing location filled in (what is already known wins)."""
        located = type(self)(
            self.cause,
            plan=self.plan or plan,
            action=self.action or action,
            template=self.template or template,
            line=self.line if self.line is not None else line,
            column=self.column,
            source=self.source,
        )
        located.__cause__ = self.__cause__
        return located

    def __str__(self) -> str:
        where = []
        if self.plan:
            where.append(f"plan {self.plan!r}")
        if self.action:
            where.append(f"action {self.action!r}")
        if self.template:
            line = f" line {self.line}" if self.line is not None else ""
            column = f" column {self.column}" if self.column is not None and self.line is not None else ""
            where.append(f"template {self.template}{line}{column}")
        return f"{', '.join(where)}: {self.cause}" if where else self.cause


class TemplateSecurityError(RenderError):
    """The template tried to leave the sandbox (private attributes, mutation, unsafe callables, raw output)."""


class RenderLimitError(RenderError):
    """The render ran past a limit: time, output size, value size or nesting depth."""


class TemplateSourceError(RenderError):
    """The template text could not be obtained: bad base64, an unreachable or oversize URL, a wrong type."""
