"""Plan templates: the rendering engine (pure, no cluster access).

The controller calls a :class:`Renderer` with a plan (``opbroker.api.SFPlan``) and :class:`RenderInputs`
(plain dicts as read from the API server) and gets back what to do: objects to apply (:class:`Rendered`),
the live objects to read (``render_sources``), the operation states (:class:`StatusResult`) or a cluster
selector. Templates are jinja2 in a sandbox; every failure is a :class:`RenderError` naming plan, action,
template and cause.

Why it is shaped this way:

* **Values never become YAML syntax** (:mod:`.interpolation`): a parameter holding ``"\\nkind: ClusterRole"``
  stays that string, while ``name: {{ prefix }}-{{ id }}`` reads naturally.
* **Generated secrets live in the registries** (:mod:`.registry`, :mod:`.generators`), which the controller
  persists; re-rendering the same instance is byte-identical.
* **Plan authors are trusted less than the controller** (:mod:`.environment`, :mod:`.limits`): no Python
  internals, files or environment; bounded time and output.
* **Pure**: no pulumi, no kubernetes client; URL fetching goes through an injectable :class:`Fetcher`. The default
  one (:mod:`.fetching`, the package's one network edge) connects only where its :class:`FetchPolicy` allows
  (:mod:`.urlpolicy`), within one deadline.
"""

from opbroker.rendering.errors import RenderError, RenderLimitError, TemplateSecurityError, TemplateSourceError
from opbroker.rendering.fetching import FetchError, HttpFetcher
from opbroker.rendering.limits import Limits
from opbroker.rendering.loading import Fetcher
from opbroker.rendering.output import RenderedObject
from opbroker.rendering.registry import Registry, binding_registry, instance_registry
from opbroker.rendering.renderer import Rendered, Renderer, RenderInputs
from opbroker.rendering.status import SectionStatus, StatusResult
from opbroker.rendering.urlpolicy import FetchPolicy

__all__ = [
    "FetchError",
    "FetchPolicy",
    "Fetcher",
    "HttpFetcher",
    "Limits",
    "Registry",
    "RenderError",
    "RenderInputs",
    "RenderLimitError",
    "Rendered",
    "RenderedObject",
    "Renderer",
    "SectionStatus",
    "StatusResult",
    "TemplateSecurityError",
    "TemplateSourceError",
    "binding_registry",
    "instance_registry",
]
