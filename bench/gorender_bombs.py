"""The Go renderer's peak memory under each template bomb of issue 25, and what each bomb ends as.

For every bomb, as a gotemplate and inside a helm chart: a fresh renderer process (default limits: 1 MiB of
output, 2 s, a 256 MiB memory ceiling) renders a trivial template, then the bomb; a thread reads the
process's high-water mark (VmHWM) every millisecond, so a process the bomb kills is measured too. Recorded:
the outcome (the error's class and its first words), the peak resident memory, the seconds, and whether the
next render was served. Also the rate of the Zalando plan's ``status`` render, the one the controller renders
most, since every function call now goes through a size check.

Run: ``python -m bench.gorender_bombs`` (``--json PATH`` to keep the figures). Results:
``bench/results/GORENDER-BOMBS.md``.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import tarfile
import time
from pathlib import Path
from typing import Any

import yaml

from opbroker.api import SFPlan, TemplateAction
from opbroker.rendering import Limits, Renderer, RenderError, RenderInputs
from opbroker.rendering.goengine import DEFAULT_MEMORY_CEILING, GoEngine, PeakWatch

REPO = Path(__file__).resolve().parent.parent
SEED = REPO / "tests" / "data" / "seeds" / "sfplan-postgresql-zalando.yaml"
INPUTS = REPO / "examples" / "catalog" / "render-inputs"
MIB = 1 << 20

BOMBS = {
    "indent 400 MB": '{{ $x := indent 400000000 "a" }}',
    "print doubling": '{{ $s := "0123456789abcdef" }}{{ range until 40 }}{{ $s = print $s $s }}{{ end }}',
    "printf width": '{{ $x := printf "%999999999d" 1 }}',
    "list nesting doubling": '{{ $l := list "0123456789" }}{{ range until 40 }}{{ $l = list $l $l }}{{ end }}',
    "dict set into itself": '{{ $d := dict }}{{ $_ := set $d "a" $d }}{{ $d }}',
    "append of 100 KB items": '{{ $s := repeat 100000 "x" }}{{ $l := list }}'
    "{{ range until 100000 }}{{ $l = append $l $s }}{{ end }}",
    "toJson escaping": '{{ $s := repeat 900000 "<" }}{{ $j := toJson $s }}',
    "split into characters": '{{ $x := split "" (repeat 1000000 "x") }}',
    "output loop": '{{ $s := repeat 100000 "x" }}{{ range until 1000000 }}{{ $s }}{{ end }}',
    "400 variables of 1 MB": "".join(f'{{{{ $v{i} := repeat 1000000 "x" }}}}' for i in range(400)),
}
CM = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\n"
INSTANCE = {"metadata": {"name": "db1", "namespace": "team-a"}, "spec": {"instanceId": "db1", "planId": "p"}}


def _plan(template: dict[str, Any]) -> SFPlan:
    spec = {"name": "p", "id": "p", "serviceId": "s", "description": "d", "templates": [template]}
    return SFPlan.model_validate({"metadata": {"name": "bomb"}, "spec": spec})


def _template(engine: str, text: str) -> dict[str, Any]:
    if engine == "gotemplate":
        return {"action": "provision", "type": "gotemplate", "content": text + CM}
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, body in {
            "Chart.yaml": "apiVersion: v2\nname: bombs\nversion: 0.1.0\n",
            "templates/b.yaml": text + CM,
        }.items():
            info = tarfile.TarInfo(f"bombs/{name}")
            info.size = len(body.encode())
            archive.addfile(info, io.BytesIO(body.encode()))
    encoded = base64.b64encode(buffer.getvalue()).decode()
    return {"action": "provision", "type": "helm", "contentEncoded": encoded}


def bomb(engine: str, text: str) -> dict[str, Any]:
    """One bomb in a fresh renderer: outcome, peak resident memory, seconds, and the next render served."""
    limits = Limits()
    renderer = Renderer(limits=limits, go=GoEngine(limits, memory_ceiling=DEFAULT_MEMORY_CEILING))
    inputs = RenderInputs(instance=INSTANCE, default_namespace="ns")
    try:
        renderer.render_objects(_plan(_template("gotemplate", "")), TemplateAction.PROVISION, inputs)
        idle = renderer.go.peak_rss() or 0
        started = time.perf_counter()
        with PeakWatch(renderer.go) as watch:
            try:
                renderer.render_objects(_plan(_template(engine, text)), TemplateAction.PROVISION, inputs)
                outcome = "rendered"
            except RenderError as exc:
                outcome = f"{type(exc).__name__}: {exc.cause[:90]}"
        seconds = time.perf_counter() - started
        served = bool(
            renderer.render_objects(_plan(_template("gotemplate", "")), TemplateAction.PROVISION, inputs).objects
        )
    finally:
        renderer.go.close()
    return {
        "outcome": outcome,
        "peak_mib": round(watch.peak / MIB, 1),
        "idle_mib": round(idle / MIB, 1),
        "seconds": round(seconds, 3),
        "next_served": served,
    }


def status_rate(seconds: float = 3.0) -> float:
    """Renders per second of the seed plan's status template with a binding and its live sources."""
    plan = SFPlan.model_validate(yaml.safe_load(SEED.read_text()))
    load = lambda name: yaml.safe_load((INPUTS / name).read_text())  # noqa: E731
    sources = {name: load(f"sources/{name}.yaml") for name in ("postgresql", "secret", "svc")}
    inputs = RenderInputs(
        instance=load("instance.yaml"), binding=load("binding.yaml"), sources=sources, default_namespace="opbroker"
    )
    renderer = Renderer()
    try:
        renderer.render_status(plan, inputs)
        count, started = 0, time.perf_counter()
        while time.perf_counter() - started < seconds:
            renderer.render_status(plan, inputs)
            count += 1
        return count / (time.perf_counter() - started)
    finally:
        renderer.go.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()
    results: dict[str, Any] = {"ceiling_mib": DEFAULT_MEMORY_CEILING // MIB, "bombs": {}}
    print(f"{'bomb':28} {'engine':10} {'peak MiB':>9} {'s':>6}  outcome")
    for name, text in BOMBS.items():
        for engine in ("gotemplate", "helm"):
            figures = bomb(engine, text)
            results["bombs"][f"{name} ({engine})"] = figures
            print(f"{name:28} {engine:10} {figures['peak_mib']:9.1f} {figures['seconds']:6.2f}  {figures['outcome']}")
    results["status_renders_per_second"] = round(status_rate(), 1)
    print(f"Zalando status renders/s: {results['status_renders_per_second']}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
