"""The Call effect's dispatch: an explicit table of the OSB client's methods, so a plan can only name a request the
client makes (no attribute of the client reached by name)."""

from __future__ import annotations

from opbroker import osbclient
from opbroker.controller.servicecatalog.effects import METHODS

#: Every request the Service Catalog plans send (instance_plan, binding_plan, live).
SENT = {
    "provision",
    "get_instance",
    "update",
    "deprovision",
    "last_operation",
    "bind",
    "get_binding",
    "binding_last_operation",
    "unbind",
}


def test_every_request_the_plans_send_dispatches_to_the_client_method_of_that_name() -> None:
    assert set(METHODS) == SENT
    with osbclient.Client(osbclient.Broker(url="http://broker.invalid")) as client:
        for name, method in METHODS.items():
            assert method(client) == getattr(client, name), name
    assert "close" not in METHODS and "__enter__" not in METHODS  # nothing else of the client is reachable
