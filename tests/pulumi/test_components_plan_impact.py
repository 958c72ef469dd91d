"""The SFPlan's impact preview under Pulumi's mocks (no cluster, no child process: the answer is given): which
cluster it reads, what it shows under the plan (counts first, then the first diffs, each bounded in lines and
bytes, the others by name), one line for a new plan, a cluster that cannot be read or an identity that may not
impersonate, and nothing asked outside a preview or when switched off. The real engine reading a real cluster:
tests/pulumi/test_plan_impact.py.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pulumi
import pytest

from opbroker.api import adminrequests as wire
from opbroker.components import SFPlan, impact, testing
from tests.pulumi.test_components_catalog import plan_args

ACCOUNT = "system:serviceaccount:opbroker:opbroker-plans"


def diff_of(name: str, lines: int) -> str:
    head = f"--- team/{name} (current plan)\n+++ team/{name} (new plan)\n@@ -1,{lines} +1,{lines} @@\n"
    return head + "".join(f"-  line{i}: 1\n+  line{i}: 2\n" for i in range(lines))


def answer(changed: int, *, unchanged: int = 0, failing: int = 0, lines: int = 2) -> wire.PreviewAnswer:
    instances = [
        wire.InstancePreview(namespace="team", name=f"db{i}", change="changed", diff=diff_of(f"db{i}", lines))
        for i in range(changed)
    ] + [
        wire.InstancePreview(namespace="team", name=f"bad{i}", change="failing", error="an owner parameter is missing")
        for i in range(failing)
    ]
    return wire.PreviewAnswer(
        phase=wire.Phase.SUCCEEDED,
        instances=instances[: impact.MAX_LISTED],
        changed=changed,
        unchanged=unchanged,
        failing=failing,
        acting_as=ACCOUNT,
    )


# -- what is shown (pure) ---------------------------------------------------------------------------------------


def test_counts_come_first_then_each_changed_instance_with_its_diff() -> None:
    shown = impact.lines(answer(2, unchanged=1, failing=1))

    assert shown[0] == (
        impact.Level.WARNING,
        f"impact on running instances (read as {ACCOUNT}): 4 instance(s): 2 changed, 1 unchanged, 1 failing to render",
    )
    assert shown[1] == (impact.Level.INFO, "~ team/db0\n" + diff_of("db0", 2).rstrip("\n"))
    assert shown[2][1].startswith("~ team/db1\n--- team/db1 (current plan)")
    assert shown[3] == (
        impact.Level.WARNING,
        "! team/bad0: fails to render with the new plan: an owner parameter is missing",
    )
    assert len(shown) == 4


def test_only_the_first_diffs_are_shown_the_others_by_name_then_by_count() -> None:
    shown = impact.lines(answer(30), max_diffs=3)

    assert [text.split("\n")[0] for _, text in shown[1:4]] == ["~ team/db0", "~ team/db1", "~ team/db2"]
    listed = ", ".join(f"team/db{i}" for i in range(3, impact.MAX_LISTED))
    assert shown[4] == (impact.Level.INFO, f"diffs not shown for {listed} and 10 more: see `opbroker plan diff`")
    assert len(shown) == 5


@pytest.mark.parametrize(
    ("max_lines", "max_bytes", "kept"),
    [(10, 100_000, 10), (1000, 200, 200 // len("-  line10: 1\n"))],
    ids=["lines", "bytes"],
)
def test_each_diff_is_cut_in_lines_and_bytes_saying_how_much_is_left(max_lines: int, max_bytes: int, kept: int) -> None:
    (_, text), *_ = impact.lines(answer(1, lines=300), max_lines=max_lines, max_bytes=max_bytes)[1:]

    body = text.split("\n")[1:]
    assert len(body) <= kept + 1 and len(body) >= kept - 3
    assert len("\n".join(body[:-1]).encode()) <= max_bytes
    total = len(diff_of("db0", 300).splitlines())
    assert body[-1] == f"… {total - (len(body) - 1)} more line(s) not shown"


def test_a_diff_the_cluster_cut_already_says_so() -> None:
    cut = wire.InstancePreview(namespace="team", name="db0", change="changed", diff="-a\n+b\n", truncated=True)
    shown = impact.lines(wire.PreviewAnswer(phase=wire.Phase.SUCCEEDED, instances=[cut], changed=1))

    assert shown[1] == (impact.Level.INFO, "~ team/db0\n-a\n+b\n… the rest of this diff not shown")


def test_a_new_plan_and_a_problem_are_one_line_each() -> None:
    new = wire.PreviewAnswer(phase=wire.Phase.SUCCEEDED, message="plan 'p' is not in namespace 'opbroker' yet")
    problem = wire.PreviewAnswer(phase=wire.Phase.FAILED, message=f"your user may not impersonate {ACCOUNT}")

    assert impact.lines(new) == [
        (impact.Level.INFO, "impact on running instances: plan 'p' is not in namespace 'opbroker' yet")
    ]
    assert impact.lines(problem) == [
        (impact.Level.WARNING, f"impact on running instances not shown: your user may not impersonate {ACCOUNT}")
    ]


def test_the_cluster_is_the_plans_own_then_the_stacks_then_the_environments(tmp_path: Path) -> None:
    config = {"kubernetes:kubeconfig": "/stack/kubeconfig", "kubernetes:context": "dev"}
    (tmp_path / ".kube").mkdir()
    (tmp_path / ".kube" / "config").write_text("apiVersion: v1\n")

    given = impact.find_cluster("apiVersion: v1\nclusters: []\n", config.get, {"KUBECONFIG": "/env"}, tmp_path)
    assert given is not None and given.is_text and given.context == "dev"
    assert impact.find_cluster(None, config.get, {"KUBECONFIG": "/env"}, tmp_path) == impact.Cluster(
        "/stack/kubeconfig", "dev", "the stack's kubernetes:kubeconfig"
    )
    assert impact.find_cluster(None, {}.get, {"KUBECONFIG": "/env"}, tmp_path) == impact.Cluster(
        "/env", None, "KUBECONFIG"
    )
    assert impact.find_cluster(None, {}.get, {}, tmp_path) == impact.Cluster(
        str(tmp_path / ".kube" / "config"), None, "~/.kube/config"
    )
    assert impact.find_cluster(None, {}.get, {}, tmp_path / "nowhere") is None


def test_the_child_is_this_pythons_plan_diff_as_the_plans_account() -> None:
    argv = impact.command("/tmp/p.yaml", "/k", namespace="opbroker", context="dev")

    assert argv[1:6] == ["-m", "opbroker.cli.main", "plan", "diff", "/tmp/p.yaml"]
    assert "--as-plan-account" in argv and argv[argv.index("--output") + 1] == "json"
    assert argv[argv.index("--kube-context") + 1] == "dev" and argv[argv.index("--namespace") + 1] == "opbroker"


# -- under the component (mocks) ---------------------------------------------------------------------------------


def preview_plan(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, given: wire.PreviewAnswer, **mocked: Any
) -> tuple[list[tuple[str, str, impact.Cluster]], list[logging.LogRecord]]:
    asked: list[tuple[str, str, impact.Cluster]] = []

    def ask(plan: Any, namespace: str, cluster: impact.Cluster) -> wire.PreviewAnswer:
        asked.append((plan.spec.id, namespace, cluster))
        return given

    monkeypatch.setattr(impact, "ask", ask)
    caplog.set_level(logging.INFO)
    args = plan_args(**mocked.pop("args", {}))
    with testing.mocked(**mocked):
        pulumi.runtime.test(lambda: SFPlan("small", args).plan_id)()
    return asked, [
        r for r in caplog.records if "impact on running instances" in r.getMessage() or "team/" in r.getMessage()
    ]


def test_a_preview_logs_the_impact_read_from_the_stacks_cluster(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    asked, logged = preview_plan(
        monkeypatch, caplog, answer(1, unchanged=1), preview=True, config={"kubernetes:kubeconfig": "/k"}
    )

    assert asked == [("plan-small", "opbroker", impact.Cluster("/k", None, "the stack's kubernetes:kubeconfig"))]
    assert [r.levelname for r in logged] == ["INFO", "INFO"]
    assert logged[0].getMessage().endswith("2 instance(s): 1 changed, 1 unchanged, 0 failing to render")
    assert logged[1].getMessage().startswith("~ team/db0\n--- team/db0 (current plan)")


def test_nothing_is_asked_outside_a_preview_or_when_switched_off(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    config = {"kubernetes:kubeconfig": "/k"}
    asked, logged = preview_plan(monkeypatch, caplog, answer(1), preview=False, config=config)
    assert asked == [] and logged == []
    asked, logged = preview_plan(
        monkeypatch, caplog, answer(1), preview=True, config=config, args={"preview_impact": False}
    )
    assert asked == [] and logged == []
