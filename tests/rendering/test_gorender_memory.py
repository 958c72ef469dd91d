"""The Go renderer under hostile templates: memory bombs end as render errors within its memory ceiling, and
what it writes on stderr neither blocks it nor leaks.

Aspects covered: each bomb of issue 25 (``indent`` of 400 MB, a doubling loop of ``print``, a list doubled by
nesting, a dict set into itself, hundreds of 1 MB variables) and its helm variant ends as a
:class:`RenderLimitError` naming plan, action and template, with the renderer's peak resident memory
measured below its ceiling, and the next render served; a render past the hard ceiling (the address-space
cap) kills only that render; a plan whose trial render is a bomb is reported as an error of the plan; more
than 64 KiB of helm warnings on stderr does not block the renderer and no value of them is logged; a stderr
line never lands in another render's error.
"""

from __future__ import annotations

import base64
import io
import logging
import os
import signal
import tarfile
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from opbroker.api import SFPlan, TemplateAction
from opbroker.rendering import Limits, Renderer, RenderInputs, RenderLimitError
from opbroker.rendering.checking import check_plan
from opbroker.rendering.goengine import DEFAULT_MEMORY_CEILING, EngineCrashed, GoEngine, PeakWatch, loggable

pytestmark = pytest.mark.process  # runs another program (see tests/conftest.py)

INSTANCE = {"metadata": {"name": "db1", "namespace": "team-a"}, "spec": {"instanceId": "db1", "planId": "p"}}
CM = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\n"
MIB = 1 << 20

#: The bombs, as a gotemplate's text (helm variants put the same text in a chart's template).
BOMBS = {
    "indent": '{{ $x := indent 400000000 "a" }}',
    "print-doubling": '{{ $s := "0123456789abcdef" }}{{ range until 40 }}{{ $s = print $s $s }}{{ end }}{{ len $s }}',
    "list-doubling": '{{ $l := list "0123456789" }}{{ range until 40 }}{{ $l = list $l $l }}{{ end }}{{ len $l }}',
    "dict-into-itself": '{{ $d := dict }}{{ $_ := set $d "a" $d }}{{ $d }}',
    "toJson-escaping": '{{ $s := repeat 900000 "<" }}{{ $j := toJson $s }}',
    # helm's engine wrote a chart's text into an unbounded buffer (a gotemplate's writer was bounded already)
    "output-loop": '{{ $s := repeat 100000 "x" }}{{ range until 1000000 }}{{ $s }}{{ end }}',
    # Each variable is within the bounds; together they pass the renderer's memory watchdog.
    "many-variables": "".join(f'{{{{ $v{i} := repeat 1000000 "x" }}}}' for i in range(400)),
}


def plan(*templates: dict[str, Any]) -> SFPlan:
    return SFPlan.model_validate(
        {
            "metadata": {"name": "go-plan"},
            "spec": {"name": "p", "id": "p", "serviceId": "s", "description": "d", "templates": list(templates)},
        }
    )


def chart(files: dict[str, str]) -> str:
    """A chart archive named "bombs" holding ``files`` (beside its Chart.yaml), base64 for contentEncoded."""
    files = {"Chart.yaml": "apiVersion: v2\nname: bombs\nversion: 0.1.0\n", **files}
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"bombs/{name}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return base64.b64encode(buffer.getvalue()).decode()


def gotemplate(text: str) -> dict[str, Any]:
    return {"action": "provision", "type": "gotemplate", "content": text + CM}


def helm(files: dict[str, str], values: str = "") -> dict[str, Any]:
    return {"action": "provision", "type": "helm", "contentEncoded": chart(files), "content": values}


def provision(renderer: Renderer, template: dict[str, Any]) -> list[dict[str, Any]]:
    inputs = RenderInputs(instance=INSTANCE, default_namespace="ns")
    return [o.manifest for o in renderer.render_objects(plan(template), TemplateAction.PROVISION, inputs).objects]


@pytest.fixture
def renderer() -> Iterator[Renderer]:
    limits = Limits(timeout=5.0)
    renderer = Renderer(limits=limits, go=GoEngine(limits, memory_ceiling=DEFAULT_MEMORY_CEILING))
    yield renderer
    renderer.go.close()


# -- bombs ----------------------------------------------------------------------------------------------------------


#: Every bomb in both engines, but the output loop of a gotemplate, which today's writer already bounds.
CASES = [(b, e) for b in sorted(BOMBS) for e in ("gotemplate", "helm") if (b, e) != ("output-loop", "gotemplate")]


@pytest.mark.parametrize(("bomb", "engine"), CASES)
def test_a_bomb_is_a_render_error_within_the_memory_ceiling(renderer: Renderer, bomb: str, engine: str) -> None:
    template = gotemplate(BOMBS[bomb]) if engine == "gotemplate" else helm({"templates/bomb.yaml": BOMBS[bomb] + CM})
    provision(renderer, gotemplate(""))  # the process runs: its peak is measured from here
    with PeakWatch(renderer.go) as watch, pytest.raises(RenderLimitError) as caught:
        provision(renderer, template)
    message = str(caught.value)
    assert message.startswith("plan 'go-plan', action 'provision', template provision"), message
    assert 0 < watch.peak < DEFAULT_MEMORY_CEILING, f"peak {watch.peak // MIB} MiB: {message}"
    assert provision(renderer, gotemplate(""))[0]["metadata"]["name"] == "cm", "the next render is served"


def test_a_render_past_the_hard_ceiling_fails_alone_and_the_renderer_restarts() -> None:
    # A generous output limit lets one allocation of 200 MB through the function bounds: only the
    # address-space cap stops it, and the process dies of it.
    limits = Limits(timeout=5.0, max_output_bytes=1 << 30)
    renderer = Renderer(limits=limits, go=GoEngine(limits, memory_ceiling=64 * MIB))
    try:
        provision(renderer, gotemplate(""))
        with PeakWatch(renderer.go) as watch, pytest.raises(RenderLimitError) as caught:
            provision(renderer, gotemplate('{{ $x := repeat 200000000 "x" }}'))
        assert "more than the renderer's memory ceiling of 64 MiB" in str(caught.value)
        assert str(caught.value).startswith("plan 'go-plan', action 'provision'")
        assert 0 < watch.peak < 64 * MIB
        assert provision(renderer, gotemplate(""))[0]["metadata"]["name"] == "cm"
        assert renderer.go.starts == 2
    finally:
        renderer.go.close()


@pytest.mark.parametrize("bomb", ["indent", "many-variables"])
def test_a_plan_whose_trial_render_is_a_bomb_is_reported_as_an_error_of_the_plan(renderer: Renderer, bomb: str) -> None:
    provision(renderer, gotemplate(""))
    with PeakWatch(renderer.go) as watch:
        verdict = check_plan(plan(gotemplate(BOMBS[bomb])), renderer)
    assert not verdict.ok
    (error,) = verdict.errors
    assert str(error).startswith("templates[0]: plan 'go-plan', action 'provision', template provision")
    assert 0 < watch.peak < DEFAULT_MEMORY_CEILING
    assert provision(renderer, gotemplate(""))[0]["metadata"]["name"] == "cm"


# -- stderr ---------------------------------------------------------------------------------------------------------

#: A chart whose defaults hold secrets under 1 000 keys the values template makes tables: helm's value
#: coalescing warns once per key, printing the default (about 90 KiB of stderr per render).
WARNING_KEYS = 1000
NOISY_CHART = {
    "values.yaml": "t:\n" + "".join(f"  k{i}: SECRET-{i}\n" for i in range(WARNING_KEYS)),
    "templates/cm.yaml": CM,
}
NOISY_VALUES = "t:\n" + "".join(f"  k{i}: {{a: 1}}\n" for i in range(WARNING_KEYS))


def test_more_than_64_kib_of_stderr_does_not_block_the_renderer_and_no_value_is_logged(
    renderer: Renderer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="opbroker.rendering.goengine")
    for _ in range(3):
        assert provision(renderer, helm(NOISY_CHART, NOISY_VALUES))[0]["kind"] == "ConfigMap"
    assert renderer.go.starts == 1
    renderer.go.close()  # the stderr thread reads to the end
    warnings = [r.getMessage() for r in caplog.records if "warning: destination for" in r.getMessage()]
    assert len(warnings) == 3 * WARNING_KEYS, "every helm warning is logged"
    assert all("SECRET" not in r.getMessage() for r in caplog.records)


def test_a_stderr_line_never_lands_in_another_renders_error(renderer: Renderer) -> None:
    chart_files = {"values.yaml": "t:\n  password: SECRET-OF-A\n", "templates/cm.yaml": CM}
    provision(renderer, helm(chart_files, "t:\n  password: {a: 1}\n"))  # instance A's render warns with its value
    pid = renderer.go.pid
    assert pid is not None
    killer = threading.Timer(0.3, os.kill, (pid, signal.SIGKILL))
    killer.start()
    with pytest.raises(EngineCrashed) as caught:  # instance B's render dies
        provision(renderer, gotemplate("{{ range until 60000 }}{{ range until 1000 }}{{ end }}{{ end }}"))
    killer.join()
    message = str(caught.value)
    assert "SECRET" not in message and "warning" not in message
    assert "killed by signal 9" in message


@pytest.mark.parametrize(
    ("line", "logged"),
    [
        ("gorender: log: warning: destination for ... (90 bytes withheld: they may hold values)\n", True),
        ("fatal error: runtime: out of memory\n", True),
        ("runtime: out of memory: cannot allocate 4194304-byte block (230293504 in use)\n", True),
        ("panic: password=s3cr3t\n", False),
        ("\tmain.go:12 +0x1d\n", False),
        ("warning: destination for password is a table. Ignoring non-table value (s3cr3t)\n", False),
    ],
)
def test_only_value_free_stderr_lines_are_logged(line: str, logged: bool) -> None:
    assert (loggable(line) is not None) is logged
