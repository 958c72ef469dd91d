"""The instance and binding kinds (issue 45): SFServiceInstances and SFServiceBindings, reconciled into the
objects their plan renders.

Reconcilers: :mod:`.instances` and :mod:`.bindings` (observe → plan → act on the runtime), with their decisions in
:mod:`.core` (pure, table-tested); :mod:`.abandoning` is the I/O of ``opbroker instance|binding abandon``, a way
out of a teardown that cannot finish. What they act through: :mod:`.osb_effects` (the kinds' own actions: OSB
outcomes, rendered objects applied, released or orphaned, singletons), :mod:`.rendered` (the renderer's inputs and
live sources), :mod:`.ownership` and :mod:`.singletons` (only what is ours is written), :mod:`.teardown` (in a
terminating namespace), :mod:`.identities` (whose rights an action runs with) and :mod:`.planaccounts` (a plan
account's rights, for ``opbroker grant plan-account`` and the sister preparation), :mod:`.registries` and
:mod:`.registry_sweep` (the per-instance and per-binding registries of generated values, and their housekeeping),
and :mod:`.reconciling` (what the reconcilers share: their dependencies, the placement hook, the apply and day-two
memories).

The sister clusters (:mod:`opbroker.controller.multicluster`) place instances through these modules; the
independence contract in ``pyproject.toml`` lists each such import.
"""
