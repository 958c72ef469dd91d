"""Where opbroker's own custom resources live in the API: the coordinates every kind of the controller shares.

The instance and binding kinds (:mod:`.osb`) reconcile SFServiceInstances and SFServiceBindings and read the
catalog's SFPlans and SFServices; the catalog kind (:mod:`.catalog`) reconciles those and counts the instances of
each plan; the claims, the sister clusters (:mod:`.multicluster`) and the wiring (:mod:`.app`) name them too. So
they are kept here, beside the kinds rather than in one of them, and outside the runtime, which knows no kind
(the contract ``controller-runtime-knows-no-kind``); :class:`~.runtime.kube.Kind` is the runtime's shape of one.
"""

from __future__ import annotations

from opbroker.controller.runtime.kube import Kind

INSTANCES = Kind("osb.servicefabrik.io", "v1alpha1", "sfserviceinstances")
BINDINGS = Kind("osb.servicefabrik.io", "v1alpha1", "sfservicebindings")
PLANS = Kind("osb.servicefabrik.io", "v1alpha1", "sfplans")
SERVICES = Kind("osb.servicefabrik.io", "v1alpha1", "sfservices")
