"""The OSB demo walks the demo catalog's own service: a borrowed cluster may serve others first."""

from __future__ import annotations

import yaml

from opbroker.devcluster.devstack import DEMO_OPERATOR, DEMO_PLAN, DEMO_SERVICE


def test_the_demo_names_the_service_its_catalog_declares() -> None:
    documents = list(yaml.safe_load_all((DEMO_OPERATOR / "catalog.yaml").read_text()))
    services = [d["spec"]["name"] for d in documents if d and d["kind"] == "SFService"]
    assert services == [DEMO_SERVICE]


def test_the_demo_names_the_plan_its_catalog_declares() -> None:
    documents = list(yaml.safe_load_all((DEMO_OPERATOR / "catalog.yaml").read_text()))
    assert [d["spec"]["name"] for d in documents if d and d["kind"] == "SFPlan"] == [DEMO_PLAN]
