"""The Go renderer's client: the long-lived process, its failures, limits and errors, and helm charts.

Aspects covered: a crash between renders or during one (the render fails clearly, the next one gets a fresh
process); a runaway render stopped by the Go side's watchdog; output size limits enforced by Go; parse,
unknown-function and execution errors located by plan, action, line and column; the sandbox (no env, no
DNS); helm charts shipped in ``contentEncoded`` or fetched from ``url``, with the values template, release
name, ``.Capabilities``, ``include``/``tpl``/``required``/``toYaml`` and a disabled ``lookup``; validation
refusing what cannot render; the binary's cache key following its sources.
"""

from __future__ import annotations

import base64
import io
import os
import signal
import tarfile
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from opbroker import gorender
from opbroker.api import SFPlan, TemplateAction
from opbroker.rendering import Limits, Renderer, RenderError, RenderInputs, RenderLimitError
from opbroker.rendering.checking import check_plan
from opbroker.rendering.goengine import EngineCrashed, GoEngine
from opbroker.rendering.renderer import release_name

pytestmark = pytest.mark.process  # runs another program (see tests/conftest.py)

REPO = Path(__file__).resolve().parents[2]
CHART_DIR = REPO / "tests" / "data" / "charts" / "tiny"
INSTANCE = {"metadata": {"name": "db1", "namespace": "team-a"}, "spec": {"instanceId": "db1", "planId": "p"}}
CM = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .instance.metadata.name }}\n"


def chart_archive(directory: Path = CHART_DIR) -> bytes:
    """A chart folder of tests/data/charts (tiny by default) packed as `helm package` does (a <name>/ folder in a
    .tgz)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        archive.add(directory, arcname=directory.name)
    return buffer.getvalue()


def plan(*templates: dict[str, Any]) -> SFPlan:
    return SFPlan.model_validate(
        {
            "metadata": {"name": "go-plan"},
            "spec": {"name": "p", "id": "p", "serviceId": "s", "description": "d", "templates": list(templates)},
        }
    )


def gotemplate(action: str, content: str) -> dict[str, Any]:
    return {"action": action, "type": "gotemplate", "content": content}


def inputs(**overrides: Any) -> RenderInputs:
    return RenderInputs(**({"instance": INSTANCE, "default_namespace": "controller-ns"} | overrides))


@pytest.fixture
def renderer() -> Iterator[Renderer]:
    renderer = Renderer(limits=Limits(timeout=1.0, max_output_bytes=64 * 1024))
    yield renderer
    renderer.go.close()


def provision(renderer: Renderer, content: str) -> list[dict[str, Any]]:
    rendered = renderer.render_objects(plan(gotemplate("provision", content)), TemplateAction.PROVISION, inputs())
    return [o.manifest for o in rendered.objects]


# -- the process ----------------------------------------------------------------------------------------------------


def test_the_process_starts_lazily_and_is_reused(renderer: Renderer) -> None:
    assert renderer.go.pid is None, "a renderer that has rendered nothing runs no process"
    provision(renderer, CM)
    pid = renderer.go.pid
    for _ in range(20):
        provision(renderer, CM)
    assert renderer.go.pid == pid and renderer.go.starts == 1


def test_a_crash_between_renders_is_invisible_but_for_a_restart(renderer: Renderer) -> None:
    provision(renderer, CM)
    pid = renderer.go.pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    time.sleep(0.1)
    assert provision(renderer, CM)[0]["metadata"]["name"] == "db1"
    assert renderer.go.starts == 2 and renderer.go.pid != pid


def test_a_crash_during_a_render_fails_that_render_clearly_and_the_next_succeeds(renderer: Renderer) -> None:
    provision(renderer, CM)
    pid = renderer.go.pid
    assert pid is not None
    killer = threading.Timer(0.2, os.kill, (pid, signal.SIGKILL))
    killer.start()
    slow = "{{ range until 60000 }}{{ range until 1000 }}{{ end }}{{ end }}" + CM
    with pytest.raises(EngineCrashed) as caught:
        provision(renderer, slow)
    killer.join()
    message = str(caught.value)
    assert "plan 'go-plan', action 'provision'" in message
    assert "the Go template renderer stopped while rendering" in message
    assert provision(renderer, CM)[0]["metadata"]["name"] == "db1"
    assert renderer.go.starts == 2


def test_a_runaway_render_is_stopped_by_the_go_watchdog_and_the_process_replaced(renderer: Renderer) -> None:
    provision(renderer, CM)
    started = time.monotonic()
    with pytest.raises(RenderLimitError) as caught:
        provision(renderer, "{{ range until 60000 }}{{ range until 60000 }}{{ end }}{{ end }}")
    assert time.monotonic() - started < 3
    assert "rendering took longer than the limit of 1s" in str(caught.value)
    assert renderer.go.pid is None, "the process running the runaway render must be gone"
    assert provision(renderer, CM)[0]["metadata"]["name"] == "db1"


def test_concurrent_threads_share_the_process_safely(renderer: Renderer) -> None:
    results: list[str] = []

    def work(index: int) -> None:
        instance = {"metadata": {"name": f"i{index}", "namespace": "n"}, "spec": {}}
        rendered = renderer.render_objects(
            plan(gotemplate("provision", CM)), TemplateAction.PROVISION, inputs(instance=instance)
        )
        results.append(rendered.objects[0].manifest["metadata"]["name"])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results) == sorted(f"i{i}" for i in range(16))
    assert renderer.go.starts == 1


def test_a_missing_binary_is_a_clear_error() -> None:
    engine = GoEngine(Limits(), binary=lambda: Path("/nonexistent/gorender"))
    renderer = Renderer(go=engine)
    with pytest.raises(RenderError) as caught:
        provision(renderer, CM)
    assert "cannot start the Go template renderer /nonexistent/gorender" in str(caught.value)


# -- limits and the sandbox -----------------------------------------------------------------------------------------


def test_output_over_the_limit_is_refused_by_go(renderer: Renderer) -> None:
    with pytest.raises(RenderLimitError) as caught:
        provision(renderer, CM + "data:\n  big: {{ range until 10000 }}xxxxxxxxxx{{ end }}\n")
    assert "the rendered text is larger than the limit of 65536 bytes" in str(caught.value)


def test_amplifying_functions_are_bounded_before_they_run(renderer: Renderer) -> None:
    with pytest.raises(RenderLimitError) as caught:
        provision(renderer, '{{ $x := repeat 100000000 "ab" }}' + CM)
    assert "repeat would be 200000000 bytes/items, over the limit of 65536" in str(caught.value)


@pytest.mark.parametrize("function", ["env", "expandenv", "getHostByName"])
def test_environment_and_network_functions_are_not_there(renderer: Renderer, function: str) -> None:
    with pytest.raises(RenderError) as caught:
        provision(renderer, CM + f'data:\n  x: {{{{ {function} "HOME" }}}}\n')
    assert f"action 'provision', template provision line 6: syntax error: function \"{function}\" not defined" in str(
        caught.value
    )


# -- errors ---------------------------------------------------------------------------------------------------------


def test_a_parse_error_names_plan_action_and_line(renderer: Renderer) -> None:
    with pytest.raises(RenderError) as caught:
        provision(renderer, CM + "data:\n  a: {{ if .x }}\n")
    assert str(caught.value) == (
        "plan 'go-plan', action 'provision', template provision line 7: syntax error: unexpected EOF"
    )


def test_an_execution_error_names_line_and_column(renderer: Renderer) -> None:
    with pytest.raises(RenderError) as caught:
        provision(renderer, CM + "data:\n  a: {{ index .instance.spec.missing 3 }}\n")
    assert str(caught.value).startswith(
        "plan 'go-plan', action 'provision', template provision line 6 column 8: at <index .instance.spec.missing 3>"
    )


def test_output_that_is_not_yaml_is_reported_like_jinja2_output(renderer: Renderer) -> None:
    with pytest.raises(RenderError) as caught:
        provision(renderer, "a: [\n")
    assert "the rendered text is not valid YAML" in str(caught.value)


# -- helm -----------------------------------------------------------------------------------------------------------

VALUES = "owner: {{ .instance.metadata.name }}\nreplicas: 3\ngreeting: 'hi {{ \"{{ .Release.Name }}\" }}'\n"


def helm(**source: Any) -> dict[str, Any]:
    return {"action": "provision", "type": "helm", "content": VALUES, **source}


def test_a_chart_shipped_with_the_plan_renders_with_the_values_template(renderer: Renderer) -> None:
    encoded = base64.b64encode(chart_archive()).decode()
    rendered = renderer.render_objects(plan(helm(contentEncoded=encoded)), TemplateAction.PROVISION, inputs())
    by_kind = {o.manifest["kind"]: o.manifest for o in rendered.objects}
    assert set(by_kind) == {"CustomResourceDefinition", "ConfigMap", "Secret"}
    release = f"in-{zlib.adler32(b'db1')}"
    assert release == release_name(INSTANCE)
    config = by_kind["ConfigMap"]
    assert config["metadata"]["name"] == f"{release}-tiny"
    assert config["metadata"]["namespace"] == "controller-ns"
    assert config["metadata"]["labels"] == {"app.kubernetes.io/instance": release, "app.kubernetes.io/version": "1.2.3"}
    assert config["data"]["greeting"] == f"hi {release}", "tpl renders a values string as a template"
    assert config["data"]["replicas"] == "3"
    assert config["data"]["kubeVersion"].startswith("v1.")
    assert config["data"]["looked-up"] == "{}", "lookup has no cluster: it answers an empty map"
    assert by_kind["Secret"]["stringData"] == {"owner": "db1"}
    assert "namespace" not in by_kind["CustomResourceDefinition"]["metadata"]


def test_a_chart_from_a_url_is_fetched_once(renderer: Renderer) -> None:
    fetched: list[str] = []
    archive = chart_archive()

    class Fetcher:
        def fetch(self, url: str, *, timeout: float, max_bytes: int) -> bytes:
            fetched.append(url)
            return archive

    renderer = Renderer(fetcher=Fetcher())
    try:
        the_plan = plan(helm(url="https://charts.example.com/tiny-0.1.0.tgz"))
        for _ in range(3):
            rendered = renderer.render_objects(the_plan, TemplateAction.PROVISION, inputs())
            assert len(rendered.objects) == 3
    finally:
        renderer.go.close()
    assert fetched == ["https://charts.example.com/tiny-0.1.0.tgz"]


def test_required_in_a_chart_names_the_charts_file_and_line(renderer: Renderer) -> None:
    encoded = base64.b64encode(chart_archive()).decode()
    the_plan = plan({"action": "provision", "type": "helm", "contentEncoded": encoded})
    with pytest.raises(RenderError) as caught:
        renderer.render_objects(the_plan, TemplateAction.PROVISION, inputs())
    assert str(caught.value) == (
        "plan 'go-plan', action 'provision', template provision (helm chart in contentEncoded) via "
        "tiny/templates/secret.yaml line 6 column 12: values.owner is required"
    )


def test_a_broken_chart_archive_is_a_source_error(renderer: Renderer) -> None:
    the_plan = plan(helm(contentEncoded=base64.b64encode(b"not a chart").decode()))
    with pytest.raises(RenderError) as caught:
        renderer.render_objects(the_plan, TemplateAction.PROVISION, inputs())
    assert "not a helm chart archive" in str(caught.value)


def test_a_helm_template_needs_exactly_one_chart_source() -> None:
    with pytest.raises(ValueError, match="chart archive in exactly one of url or contentEncoded"):
        plan({"action": "provision", "type": "helm", "content": VALUES})


# -- validation -----------------------------------------------------------------------------------------------------


def test_validation_catches_go_parse_errors_and_unknown_functions() -> None:
    verdict = check_plan(plan(gotemplate("provision", CM + "x: {{ nosuch 1 }}\n"), gotemplate("status", "{{ end }}")))
    assert [str(e) for e in verdict.errors] == [
        "templates[0]: plan 'go-plan', action 'provision', template provision line 5: "
        'syntax error: function "nosuch" not defined',
        "templates[1]: plan 'go-plan', action 'status', template status line 1: syntax error: unexpected {{end}}",
    ]


def test_validation_refuses_a_helm_chart_for_status_and_checks_a_shipped_chart() -> None:
    encoded = base64.b64encode(chart_archive()).decode()
    verdict = check_plan(
        plan({"action": "status", "type": "helm", "contentEncoded": encoded}, helm(contentEncoded=encoded))
    )
    assert len(verdict.errors) == 1
    assert "a helm chart renders objects (provision, bind, unbind), not status" in str(verdict.errors[0])


def test_validation_without_a_renderer_refuses_go_templates_up_front() -> None:
    renderer = Renderer(go=GoEngine(Limits(), binary=lambda: Path("/nonexistent/gorender")))
    verdict = check_plan(plan(gotemplate("provision", CM)), renderer)
    assert not verdict.ok
    assert "cannot start the Go template renderer" in str(verdict.errors[0])


def test_the_binary_cache_key_follows_the_go_sources(tmp_path: Path) -> None:
    for name in ("main.go", "go.mod", "go.sum", "main_test.go"):
        (tmp_path / name).write_text(name)
    key = gorender.source_key(tmp_path)
    (tmp_path / "main_test.go").write_text("tests do not change the binary")
    assert gorender.source_key(tmp_path) == key
    (tmp_path / "main.go").write_text("package main // changed")
    assert gorender.source_key(tmp_path) != key
    assert gorender.source_key() == gorender.cached_binary().parent.name.removeprefix("gorender-")


def test_templates_and_shared_values_are_resent_after_a_restart(renderer: Renderer) -> None:
    # The second render sends neither the template text nor the plan again; a fresh process knows neither,
    # so after a crash the client must send both again without the caller noticing.
    the_plan = plan(gotemplate("provision", CM + "data:\n  plan: {{ .plan.spec.name }}\n"))
    for _ in range(2):
        renderer.render_objects(the_plan, TemplateAction.PROVISION, inputs())
    pid = renderer.go.pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    time.sleep(0.1)
    rendered = renderer.render_objects(the_plan, TemplateAction.PROVISION, inputs())
    assert rendered.objects[0].manifest["data"] == {"plan": "p"}


def test_a_process_that_forgot_a_shared_value_is_sent_it_again(renderer: Renderer) -> None:
    the_plan = plan(gotemplate("provision", CM + "data:\n  plan: {{ .plan.spec.name }}\n"))
    renderer.render_objects(the_plan, TemplateAction.PROVISION, inputs())
    believed = set(renderer.go._sent)
    assert len(believed) == 2, "the template and the plan were sent"
    with renderer.go._lock:  # a new process behind the client's back: it holds neither
        renderer.go._stop()
        renderer.go._running()
        renderer.go._sent = set(believed)
    rendered = renderer.render_objects(the_plan, TemplateAction.PROVISION, inputs())
    assert rendered.objects[0].manifest["data"] == {"plan": "p"}


def test_validation_of_a_helm_chart_by_url_checks_its_values_template_without_fetching() -> None:
    class Refusing:
        def fetch(self, url: str, *, timeout: float, max_bytes: int) -> bytes:
            raise AssertionError(f"a preview fetched {url}")

    renderer = Renderer(fetcher=Refusing())
    try:
        good = plan(helm(url="https://charts.example.com/tiny-0.1.0.tgz"))
        assert check_plan(good, renderer).errors == ()
        bad = plan({**helm(url="https://charts.example.com/tiny-0.1.0.tgz"), "content": "owner: {{ .x "})
        (error,) = check_plan(bad, renderer).errors
        assert "template provision (helm chart https://charts.example.com/tiny-0.1.0.tgz) line 1" in str(error)
    finally:
        renderer.go.close()


def test_a_dropped_renderer_leaves_no_process_behind() -> None:
    import gc

    renderer = Renderer()
    provision(renderer, CM)
    pid = renderer.go.pid
    assert pid is not None
    del renderer
    gc.collect()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
        time.sleep(0.05)
    assert not Path(f"/proc/{pid}").exists(), "the renderer process outlived its renderer"


def test_gotemplates_come_from_content_encoded_and_url_like_jinja2_ones() -> None:
    class Fetcher:
        def fetch(self, url: str, *, timeout: float, max_bytes: int) -> bytes:
            return CM.encode()

    renderer = Renderer(fetcher=Fetcher())
    try:
        encoded = {
            "action": "provision",
            "type": "gotemplate",
            "contentEncoded": base64.b64encode(CM.encode()).decode(),
        }
        by_url = {"action": "provision", "type": "gotemplate", "url": "https://templates.example.com/cm.yaml"}
        for template in (encoded, by_url):
            rendered = renderer.render_objects(plan(template), TemplateAction.PROVISION, inputs())
            assert rendered.objects[0].manifest["metadata"]["name"] == "db1"
    finally:
        renderer.go.close()
