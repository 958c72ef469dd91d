"""The compare report's Service Catalog rows (issue 31): read from a recorded compare run, each figure per object
of its phase, so a report of the suite is never empty again (COMPARE-servicecatalog.md of 2026-11-27 was)."""

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
