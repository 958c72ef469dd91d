"""Consuming any OSB broker from inside the cluster: the Kubernetes Service Catalog model.

``Broker`` → its catalog becomes ``ServiceClass`` objects (``brokers``); ``Instance`` → provisioned through
the broker (``instances``); ``Binding`` → bound, its credentials in a Secret (``bindings``). Each kind is an
:class:`~opbroker.controller.runtime.ObservePlanAct` on the controller's one runtime; the OSB calls go
through :mod:`opbroker.osbclient`, the client the Pulumi provider uses too.
"""
