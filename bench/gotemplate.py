"""Go templates: renders per second of Service Fabrik's Zalando plan (gotemplate, the seed's own text) through
opbroker's Go renderer, beside its jinja2 port through opbroker's in-process jinja2, and bare text/template
in-process in Go (the floor: no protocol, no JSON, no YAML parsing; a Go benchmark in ``gorender/``).

Two templates are measured: ``provision`` (the object a new instance gets) and ``status`` with a binding and
its live sources (the template the controller renders most: on every poll of every operation). Both opbroker
paths do the whole job the controller gets: variables built from the request, rendering, YAML parsing, null
removal, namespaces, status sections.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from opbroker.api import SFPlan, TemplateAction
from opbroker.rendering import Renderer, RenderInputs

REPO = Path(__file__).resolve().parent.parent
SEED = REPO / "tests" / "data" / "seeds" / "sfplan-postgresql-zalando.yaml"
PORT = REPO / "examples" / "catalog" / "postgresql-zalando-plan.yaml"
INPUTS = REPO / "examples" / "catalog" / "render-inputs"
_GO_BENCH = re.compile(r"^BenchmarkBareTextTemplate/(\w+)\S*\s+\d+\s+([\d.]+) ns/op", re.MULTILINE)


def _rate(work: Callable[[], Any], seconds: float) -> float:
    work()  # warm caches (compiled templates, the renderer process)
    count, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        work()
        count += 1
    return count / (time.perf_counter() - started)


def _load(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def go_floor(seconds: float) -> dict[str, float] | None:
    """Renders/s of bare text/template per action, from ``go test -bench`` (None without Go)."""
    go = shutil.which("go")
    if go is None:
        return None
    result = subprocess.run(
        [go, "test", "-run", "^$", "-bench", "BenchmarkBareTextTemplate", f"-benchtime={max(seconds, 0.1)}s", "."],
        cwd=REPO / "gorender",
        capture_output=True,
        text=True,
        check=True,
    )
    return {action: round(1e9 / float(ns), 1) for action, ns in _GO_BENCH.findall(result.stdout)}


def run(seconds: float = 3.0) -> dict[str, Any]:
    seed, port = SFPlan.model_validate(_load(SEED)), SFPlan.model_validate(_load(PORT))
    instance, binding = _load(INPUTS / "instance.yaml"), _load(INPUTS / "binding.yaml")
    live = {name: _load(INPUTS / "sources" / f"{name}.yaml") for name in ("postgresql", "secret", "svc")}
    provision = RenderInputs(instance=instance, default_namespace="default")
    status = RenderInputs(instance=instance, binding=binding, sources=live, default_namespace="default")
    renderer = Renderer()
    try:
        rates: dict[str, dict[str, float]] = {}
        for action in ("provision", "status"):
            if action == "provision":

                def go_path() -> None:
                    renderer.render_objects(seed, TemplateAction.PROVISION, provision)

                def jinja_path() -> None:
                    renderer.render_objects(port, TemplateAction.PROVISION, provision)
            else:

                def go_path() -> None:
                    renderer.render_status(seed, status)

                def jinja_path() -> None:
                    renderer.render_status(port, status)

            rates[action] = {
                "opbroker_gotemplate": round(_rate(go_path, seconds), 1),
                "opbroker_jinja2": round(_rate(jinja_path, seconds), 1),
            }
    finally:
        renderer.go.close()
    floor = go_floor(seconds)
    for action, value in (floor or {}).items():
        rates[action]["bare_text_template_go"] = value
    return {
        "plan": "tests/data/seeds/sfplan-postgresql-zalando.yaml (gotemplate) vs examples/catalog (jinja2 port)",
        "renders_per_second": rates,
        "ratio_gotemplate_to_jinja2": {
            action: round(r["opbroker_gotemplate"] / r["opbroker_jinja2"], 3) for action, r in rates.items()
        },
        "target_met": all(r["opbroker_gotemplate"] >= r["opbroker_jinja2"] for r in rates.values()),
    }
