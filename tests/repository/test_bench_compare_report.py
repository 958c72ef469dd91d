"""The compare report's rows (issue 31): read from recorded compare runs, each figure per object of its suite or
phase — the Service Catalog's (COMPARE-servicecatalog.md of 2026-11-27 was empty), and the OSB suites' ratio."""

from __future__ import annotations

import json
from pathlib import Path

from bench import run

RECORDED = Path(__file__).resolve().parents[2] / "bench" / "results" / "compare-2026-11-27T133542Z.json"


def test_the_service_catalog_suite_has_rows_per_instance_and_binding() -> None:
    results = json.loads(RECORDED.read_text())
    markdown = run.compare_markdown(results)
    lines = [line for line in markdown.splitlines() if "servicecatalog:" in line]
    rows = {line.split(" | ")[0].removeprefix("| "): line for line in lines}
    after = results["compare"]["after"]["servicecatalog"]["instances_phase"]
    controller = round(after["cpu_seconds_by_process"]["controller"] * 1000 / after["objects"], 2)
    broker = round(after["cpu_seconds_by_process"]["broker"] * 1000 / after["objects"], 2)
    assert rows["servicecatalog: controller CPU ms/Instance"].endswith(f" | {controller} |")
    assert rows["servicecatalog: controller + broker CPU ms/Instance"].endswith(f" | {round(controller + broker, 2)} |")
    gets = round(after["requests_by_verb"]["broker"]["get"] / after["objects"], 2)
    assert rows["servicecatalog: broker GETs/Instance"].endswith(f" | {gets} |")
    assert "servicecatalog: API server CPU ms/Binding" in rows and "n/a" not in "".join(rows.values())


def test_the_osb_suites_show_issue_31s_ratio_beside_the_api_servers_cost() -> None:
    """Provisioning and bindings rows: the broker's and the API server's CPU per object beside the controller's,
    and (controller + broker) / API server, as computed from each side's CPU seconds by process."""
    results = json.loads((RECORDED.parent / "compare-2026-11-27T173026Z.json").read_text())
    rows = {
        line.split(" | ")[0].removeprefix("| "): line.split(" | ")[1:]
        for line in run.compare_markdown(results).splitlines()
        if line.startswith(("| provisioning", "| bindings"))
    }
    for side, column in (("before", 0), ("after", 1)):
        found = results["compare"][side]
        for label, suite, count in (("provisioning 1000", found["provisioning"]["1000"], "instances"),
                                    ("bindings", found["bindings"], "bindings")):  # fmt: skip
            cpu = suite["cpu_seconds_by_process"]
            what = "inst" if count == "instances" else "binding"
            assert rows[f"{label}: API server CPU ms/{what}"][column].strip(" |") == str(
                round(cpu["kube-apiserver"] * 1000 / suite[count], 2)
            )
            ratio = round((cpu["controller"] + cpu["broker"]) / cpu["kube-apiserver"], 3)
            assert rows[f"{label}: (controller + broker) / API server CPU"][column].strip(" |") == str(ratio)
