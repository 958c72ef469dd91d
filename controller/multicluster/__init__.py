"""Scheduling across clusters and multi-cluster replication (Service Fabrik's master/sister model).

The master's controller, run with ``--multicluster``, schedules each instance onto an SFCluster (setting
``spec.clusterId``), copies the catalog to every sister cluster, copies each instance and binding with its
requested state to its cluster, and mirrors the copy's status — and a binding's credentials Secret — back
onto the master object, where the broker reads them. Each sister runs an ordinary ``opbroker controller
run`` that provisions the copies like any other instance. Cluster ``"1"`` is the master itself: instances
placed there are reconciled locally, as without multi-cluster.

Layers, bottom to top (modules used qualified, as elsewhere in the controller):

* pure, no I/O: :mod:`quantities` (resource maps), :mod:`selectors` (label selector strings),
  :mod:`scheduling` (the five schedulers), :mod:`ledger` (per-cluster counts and requests in memory),
  :mod:`replicas` (copies, status mirroring, unreachable marks), :mod:`reasons` (names);
* adapters: :mod:`sisters` (clients from kubeconfig Secrets, probes, capacity, watches of the copies);
* reconcilers: :mod:`clusters` (SFCluster status, catalog replication, removal policy) and
  :mod:`placement` (the facts the instance and binding reconcilers observe, the effects their executor performs);
* wiring: :mod:`runtime` (:class:`MultiCluster`, created by the controller when multi-cluster is on).
"""
