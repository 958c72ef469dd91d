"""Suite ``jinja-bombs``: the jinja2 renderer's peak memory under templates built to exhaust it (issue 25).

Each bomb is a provision template that asks for far more text than the output limit allows, cheaply: one
1 MB string referenced 300 times and then written out (``tojson``, ``join``, ``~``, ``string``, ``indent``,
``replace`` ...), string repetition, nested lists, values repeated in the YAML output or the registry. Each
is rendered in a fresh process under the default :class:`~opbroker.rendering.Limits`; the process reports
its resident memory before the render (after compiling the template and one small render, so the
machinery is loaded) and its peak after (the kernel's high-water mark, reset just before the render:
``VmHWM``, the counter behind ``ru_maxrss``), and what the render ended with. The process runs
under an address-space ceiling (``CEILING_BYTES``) so a bomb that is not stopped fails there instead of
taking the machine.

``python -m bench.jinja_bombs`` prints the figures; ``scripts/bench.sh --suite jinja-bombs`` records them
(``tests/rendering/test_bombs.py`` asserts the same probes stay under a ceiling derived from the limit).
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

#: A 1 MB string (under the 1 MiB default output limit, so building it is allowed), and ``refs``: a list of
#: 300 references to it made without ``*`` (``batch`` pads its last batch with ``fill_with``).
BIG = '{% set big = "x" * 1000000 %}{% set refs = [big] | batch(300, big) | first %}'
HEAD = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\ndata:\n"
#: The probe process's address-space limit: far above any bounded render, far below the machine.
CEILING_BYTES = 3 << 30


@dataclass(frozen=True)
class Bomb:
    name: str
    body: str
    """The template after ``HEAD`` (the ConfigMap's ``data`` entries and whatever precedes them)."""


BOMBS: tuple[Bomb, ...] = (
    Bomb("tojson of 300 references", BIG + '{% set l = [big] * 300 %}  v: "{{ l | tojson | length }}"\n'),
    Bomb("list repetition", BIG + "{% set l = [big] * 300 %}  v: done\n"),
    Bomb("list conversion", BIG + "{% set l = refs | list %}  v: done\n"),
    Bomb("tojson of a padded batch", BIG + '  v: "{{ refs | tojson | length }}"\n'),
    Bomb("sum of lists", BIG + '  v: "{{ refs | batch(1) | sum(start=[]) | tojson | length }}"\n'),
    Bomb("tojson indent", '  v: "{{ range(100000) | list | tojson(indent=100000) | length }}"\n'),
    Bomb("join", BIG + '  v: "{{ refs | join | length }}"\n'),
    Bomb("str.join", BIG + "  v: \"{{ ''.join(refs) | length }}\"\n"),
    Bomb("string conversion", BIG + '  v: "{{ refs | string | length }}"\n'),
    Bomb("concatenation ~", BIG + "  v: \"{{ (refs) ~ '' }}\"\n"),
    Bomb("indent", '  v: "{{ ("x\\n" * 500000) | indent(1000) | length }}"\n'),
    Bomb("indent of a list", BIG + '  v: "{{ refs | indent | length }}"\n'),
    Bomb("replace", BIG + "  v: \"{{ big | replace('x', 'yyyyyyyyyy') | length }}\"\n"),
    Bomb("replace with a list", BIG + "  v: \"{{ 'abc' | replace('b', refs) }}\"\n"),
    Bomb("string multiplication", '  v: "{{ ("x" * 1000000) * 1000 }}"\n'),
    Bomb(
        "nested lists",
        BIG + "{% set a = [big, big] %}{% set b = [a, a] %}{% set c = [b, b] %}{% set d = [c, c] %}{% set e = [d, d] %}"
        "{% set f = [e, e] %}{% set g = [f, f] %}{% set h = [g, g] %}{% set n = [h, h] %}"
        '  v: "{{ n | tojson | length }}"\n',
    ),
    Bomb("printf", BIG + "  v: \"{{ (('%s' * 300) % (" + ", ".join(["big"] * 300) + ')) | length }}"\n'),
    Bomb("str.format", BIG + "  v: \"{{ ('{0}' * 300).format(big) | length }}\"\n"),
    Bomb("format filter", BIG + "  v: \"{{ ('%(a)s' * 300) | format(a=big) | length }}\"\n"),
    Bomb("center of a list", BIG + '  v: "{{ refs | center | length }}"\n'),
    Bomb("wordwrap wrapstring", BIG + "  v: \"{{ big | wordwrap(1, wrapstring='y' * 1000) | length }}\"\n"),
    Bomb("toJson", BIG + '  v: "{{ toJson(refs) | length }}"\n'),
    Bomb("toYaml", BIG + '  v: "{{ refs | toYaml | length }}"\n'),
    Bomb("b64enc", BIG + '  v: "{{ refs | b64enc | length }}"\n'),
    Bomb("sha224", BIG + '  v: "{{ sha224(refs) }}"\n'),
    Bomb(
        "setRegistry", BIG + "{% for i in range(300) %}{% set _ = setRegistry('k' ~ i, big) %}{% endfor %}  v: done\n"
    ),
    Bomb(
        "generateCertificate",
        BIG + "{% set _ = generatePrivateKey('k') %}  v: \"{{ generateCertificate('c', "
        "'k', 'cn', dnsNames=refs) | length }}\"\n",
    ),
    Bomb("output: one value in many scalars", BIG + '{% for i in range(300) %}  k{{ i }}: "x{{ big }}"\n{% endfor %}'),
    Bomb("output: one value in one scalar", BIG + '  v: "{% for i in range(300) %}{{ big }}{% endfor %}"\n'),
    Bomb(
        "output: many documents",
        BIG + "  v: x\n{% for i in range(300) %}---\napiVersion: v1\nkind: ConfigMap\n"
        "metadata:\n  name: c{{ i }}\ndata:\n  v: {{ big }}\n{% endfor %}",
    ),
    Bomb(
        "output: macro output",
        BIG + "{% macro m() %}x{{ big }}{% endmacro %}{% for i in range(300) %}  k{{ i }}: {{ m() }}\n{% endfor %}",
    ),
)

#: A render that is large but within the limits: it must still work (and its peak is the reference).
ALLOWED = Bomb(
    "allowed: 900 kB over 300 values",
    '{% set part = "x" * 3000 %}{% for i in range(300) %}  k{{ i }}: "{{ part }}"\n{% endfor %}',
)


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
    return 0


def _reset_peak() -> bool:
    """Reset the kernel's resident high-water mark (``ru_maxrss``), so the peak is the render's own."""
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
        return True
    except OSError:
        return False  # then the peak also covers imports: an overestimate, never an underestimate


def probe(body: str) -> dict[str, Any]:
    """Render ``HEAD + body`` in this process and report memory and outcome (run it in a fresh process)."""
    resource.setrlimit(resource.RLIMIT_AS, (CEILING_BYTES, CEILING_BYTES))
    import gc

    from opbroker.api import SFPlan, TemplateAction
    from opbroker.rendering import Renderer, RenderError, RenderInputs

    def plan(content: str) -> SFPlan:
        return SFPlan.model_validate(
            {
                "metadata": {"name": "bomb"},
                "spec": {
                    "name": "bomb",
                    "id": "bomb",
                    "description": "a template memory bomb",
                    "serviceId": "s",
                    "templates": [{"action": "provision", "type": "jinja2", "content": HEAD + content}],
                },
            }
        )

    renderer = Renderer()
    inputs = RenderInputs(instance={"metadata": {"name": "i"}, "spec": {}}, default_namespace="n")
    warm = plan('  v: "{{ [1, 2] | tojson }}"\n')
    renderer.render_objects(warm, TemplateAction.PROVISION, inputs)
    bomb = plan(body)
    renderer.compile(bomb, bomb.spec.templates[0])
    gc.collect()
    before = _status_kib("VmRSS")
    reset = _reset_peak()
    started = time.perf_counter()
    outcome: dict[str, Any]
    try:
        rendered = renderer.render_objects(bomb, TemplateAction.PROVISION, inputs)
        data = rendered.objects[0].manifest.get("data") or {}
        outcome = {"ok": True, "output_bytes": sum(len(str(v)) for v in data.values())}
    except RenderError as exc:
        outcome = {"ok": False, "kind": type(exc).__name__, "error": str(exc)[:400]}
    seconds = time.perf_counter() - started
    # ru_maxrss is the larger of this address space's high-water mark and the one exec replaced, which (with
    # vfork) is the parent's: a pytest parent of 120 MB would hide the render. VmHWM is this address space's
    # alone, the same counter, and the one the reset clears.
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    peak = _status_kib("VmHWM") if reset else maxrss
    return {
        **outcome,
        "seconds": round(seconds, 3),
        "rss_before_kib": before,
        "peak_kib": peak,
        "ru_maxrss_kib": maxrss,
        "growth_kib": max(peak - before, 0),
        "peak_was_reset": reset,
    }


def measure(body: str, timeout: float = 120.0) -> dict[str, Any]:
    """:func:`probe` in a fresh interpreter (the peak must be this render's, not the caller's)."""
    try:
        done = subprocess.run(
            [sys.executable, "-m", "bench.jinja_bombs", "--probe"],
            input=body,
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {"ok": False, "kind": "timeout", "error": f"no answer in {timeout:g} s (the process was killed)"}
    if done.returncode != 0:
        return {"ok": False, "kind": "crashed", "error": done.stderr[-2000:], "returncode": done.returncode}
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


def run() -> dict[str, Any]:
    """Every bomb and the allowed render, each in its own process; the limit they ran under."""
    from opbroker.rendering import Limits

    limits = Limits()
    results = {bomb.name: measure(bomb.body) for bomb in (*BOMBS, ALLOWED)}
    return {
        "max_output_bytes": limits.max_output_bytes,
        "timeout_seconds": limits.timeout,
        "address_space_ceiling_bytes": CEILING_BYTES,
        "bombs": results,
        "max_growth_mib": round(max(r.get("growth_kib", 0) for r in results.values()) / 1024, 1),
    }


def markdown(r: dict[str, Any]) -> list[str]:
    lines = [
        "## jinja2 template bombs (peak memory of the rendering process)",
        "",
        f"Default limits: output {r['max_output_bytes']} bytes, {r['timeout_seconds']} s. Growth = peak resident "
        "memory during the render minus resident memory before it (a fresh process per bomb).",
        "",
        "| template | outcome | growth MiB | seconds |",
        "|---|---|---|---|",
    ]
    for name, b in r["bombs"].items():
        outcome = "rendered" if b.get("ok") else b.get("kind", "?")
        growth = round(b["growth_kib"] / 1024, 1) if "growth_kib" in b else "n/a"
        lines.append(f"| {name} | {outcome} | {growth} | {b.get('seconds', 'n/a')} |")
    return [*lines, ""]


def main() -> None:
    if sys.argv[1:] == ["--probe"]:
        print(json.dumps(probe(sys.stdin.read())))
        return
    results = run()
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
