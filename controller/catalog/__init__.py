"""The catalog kind (issue 45): the SFServices and SFPlans of the trusted namespaces, and plan rollouts.

:mod:`.catalog` is the in-memory catalog every kind reads (fed by watch events); :mod:`.catalog_entries` reconciles
each entry (its status, duplicate ids, the instances of a plan); :mod:`.rollouts` and :mod:`.admin_requests` carry a
new plan version to the instances and the sister clusters on an administrator's request. Their decisions are in
:mod:`.core` (pure, table-tested).
"""
