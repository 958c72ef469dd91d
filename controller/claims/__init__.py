"""Registered services and claims (the Primaza model), done right.

Services that already exist are *registered* (``RegisteredService``), offered per environment
(``ServiceCatalog``) and *claimed* exclusively by applications (``ServiceClaim``), which receive a
servicebinding.io Secret projected into their workloads.

Layers, bottom to top:

* pure core, no I/O: :mod:`constraints` (environments), :mod:`matching` (candidates, ranking, verdicts),
  :mod:`states` (the RegisteredService state machine and health accounting), :mod:`servicebinding`
  (binding Secret), :mod:`workloads` (label selectors, projection), :mod:`catalogs`, :mod:`healthjobs`
  (container checks as Jobs), :mod:`registration` (broker-provisioned services registered automatically);
* adapters: :mod:`probes` (TCP/HTTP probes in a thread pool), :mod:`store` (watch cache and indexes);
* reconcilers: :mod:`registered`, :mod:`claiming`, :mod:`cataloging`, :mod:`registering`;
* entry point: :mod:`handlers` (watch handlers that only update the cache and enqueue keys,
  and the claims work queue).

Imported as modules and used qualified (``matching.match``), so each call site says where a name lives.
"""
