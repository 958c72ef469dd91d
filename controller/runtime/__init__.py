"""The controller's own framework (issue 45), which the kinds stand on: keys, outcomes, the error table, per-key
memory, the clock, the work queue and the reconcile runtime (:mod:`.runner`), the informers and the object store,
the one Kubernetes door (:mod:`.kube`, with :mod:`.served` and :mod:`.access`), the watch declarations
(:mod:`.watches`), the plans' source watches (:mod:`.sources`), the one executor (:mod:`.executor`), the passes
(:mod:`.passes`) and failures shown on objects (:mod:`.showing`), leadership, health, contact with the API server,
and the process's lifecycle (:mod:`.lifecycle`).

Every kind the controller reconciles plugs in here as an :class:`.kinds.ObservePlanAct` reconciler; see :mod:`.runner`
for what the framework owns and :mod:`.kinds` for what a kind supplies. The framework imports no kind
(``pyproject.toml``'s import contracts).

Import from the modules themselves (``from opbroker.controller.runtime.keys import Key``): this package imports
nothing, so that the Kubernetes door (``kube.py``, which keeps its objects in :mod:`.store`) and the runtime (whose
failure table reads the door's errors) can each import the other's modules without a cycle through here.
"""
