"""The benchmark harness itself works (tiny sizes; the figures come from scripts/bench.sh)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench import run

pytestmark = pytest.mark.apiserver  # its benchmarks start a local control plane (tests/conftest.py)


def test_quick_benchmarks_measure_what_they_claim() -> None:
    sizes = {**run.QUICK, "provisioning": (10, 12), "renderer": 0.2, "claims": (500, 50)}
    results = run.run_suites(["renderer", "claims", "provisioning"], sizes, log=lambda _m: None)
    assert results["renderer"]["renders_per_second"]["opbroker"] > 0
    assert results["claims"]["matched"] > 0
    for count in ("10", "12"):
        provisioned = results["provisioning"][count]
        assert provisioned["failed"] == 0
        assert provisioned["instances"] == int(count)
        # Every write is attributed; the demo plan needs five per instance and opbroker stays near that.
        assert 5 <= provisioned["opbroker_writes_per_instance"] <= 9
        assert provisioned["raw_write_rate"]["writes_per_second"] > 0
        assert 0 < provisioned["utilisation"] < 1
        assert provisioned["controller_rss_mib"]["after"] > 0 and "controller_memory_kib_per_instance" in provisioned
    assert set(results["scale_curve"]["ratios"]) >= {"opbroker_writes_per_instance", "controller_cpu_ms_per_instance"}
    markdown = run.summary_markdown(results)
    assert "| 10 |" in markdown and "Renderer" in markdown


def test_the_gotemplate_benchmark_measures_all_three_paths() -> None:
    from bench import gotemplate
    from bench.common import machine

    results = gotemplate.run(0.1)
    for action in ("provision", "status"):
        rates = results["renders_per_second"][action]
        assert rates["opbroker_gotemplate"] > 0 and rates["opbroker_jinja2"] > 0
        assert rates["bare_text_template_go"] > rates["opbroker_gotemplate"], "the floor is bare text/template"
    markdown = run.summary_markdown({"machine": machine(), "suite_dates": {}, "gotemplate": results})
    assert "| provision |" in markdown and "Target (gotemplate path ≥ jinja2 path)" in markdown


def test_the_secrets_benchmark_measures_the_controller_beside_unrelated_secrets() -> None:
    from bench.common import machine

    sizes = {**run.QUICK, "secrets": (60, 2)}
    results = run.run_suites(["secrets"], sizes, log=lambda _m: None)
    r = results["secrets"]
    assert (r["secrets"], r["instances"], r["bindings"]) == (60, 2, 2)
    for measured in (r["watched"], r["restart"]):
        assert measured["rss_mib_before"] > 0 and measured["rss_mib_after"] > 0
    # The store knows every unrelated Secret by its version and holds the bodies of the few it uses only.
    for store in (r["watched"]["store_after"], r["restart"]["store_after"]):
        assert store["objects_metadata"] >= 60 and store["objects_body"] <= 8
    assert r["restart"]["writes_after"] == 0
    assert "Unrelated Secrets in the cluster" in run.summary_markdown({"machine": machine(), "secrets": r})
    side = {"ref": "x", "commit": "0" * 40, "secrets": r}
    compared = {"machine": machine(), "sizes": sizes, "suites": ["secrets"], "compare": {"before": side, "after": side}}
    markdown = run.compare_markdown(compared)
    assert "secrets: Secret bodies held (running)" in markdown and "restart:" not in markdown
    assert "Partial run" not in markdown


def test_the_compared_restart_alternates_the_sides_controllers_on_one_cluster(tmp_path: Path) -> None:
    """Each side's controller restarted in turn (A B B A) over the same settled objects, started with that
    side's environment (read back from the process), every run's figures kept and the median's reported. The
    restart suite run alone (``restart.run``) is the same code with one side, so this covers it."""
    from bench import restart
    from bench.common import machine

    sides = {"before": {"PYTHONPATH": str(tmp_path)}, "after": {}}
    answers = restart.run_alternating(4, 8, sides, rounds=2, quiet=2.0)
    assert set(answers) == {"before", "after"}
    for name, r in answers.items():
        assert r["order"] == ["before", "after", "after", "before"]
        assert (r["instances"], r["bindings"], r["objects"], len(r["runs"]["cpu_seconds_to_idle"])) == (4, 8, 12, 2)
        assert r["settle"]["instances_failed"] == 0 and r["settle"]["bindings_failed"] == 0
        assert r["restart"]["cpu_seconds_to_idle"] in r["runs"]["cpu_seconds_to_idle"]
        assert r["runs"]["writes"] == [0, 0] and r["restart"]["objects_seen"] == 12
        expected = str(tmp_path) if name == "before" else os.environ.get("PYTHONPATH")
        assert r["restart"]["pythonpath"] == expected and r["empty"]["pythonpath"] == expected
        for measured, objects in ((r["restart"], 12), (r["empty"], 0)):
            # The fresh controller lists and watches what it reconciles, and saw every settled object.
            assert measured["reads"]["list"] > 0 and measured["reads"]["watch"] > 0
            assert measured["objects_seen"] == objects and measured["queue_gauges"]
            assert measured["rss_kib"] > 0 and measured["cpu_seconds_to_idle"] > 0
            assert measured["ready_seconds"] <= measured["idle_seconds"]
            # The old controller stopped on SIGTERM, gracefully (issue 45; kopf's teardown ended in a SIGKILL, -9).
            assert measured["old_controller"]["exit_code"] == 0, measured["old_controller"]
        assert r["restart"]["reconciles"] >= 12
        # Renders counted (the controller's opbroker_renders_total): none over the empty cluster; each run's kept.
        assert r["empty"]["renders"] == 0 and all(isinstance(n, int) for n in r["runs"]["renders"])
        # Settled objects need no write: a fresh controller that rewrote them (a status churn) would count here.
        assert r["controller_writes"] == r["restart"]["writes"] == 0
        assert isinstance(r["memory_per_object_kib"], float)
    # The suite's own run (bench/run.py --suite restart) is this, with one side; its report:
    markdown = run.summary_markdown({"machine": machine(), "suite_dates": {}, "restart": answers["after"]})
    assert "Controller restart over settled objects" in markdown and "| 12 settled objects |" in markdown
    side = {"ref": "x", "commit": "0" * 40}
    compared = {
        "machine": machine(),
        "sizes": {"provisioning": (1,)},
        "suites": ["restart"],
        "compare": {"before": {**side, "restart": answers["before"]}, "after": {**side, "restart": answers["after"]}},
    }
    markdown = run.compare_markdown(compared)
    assert "restart: CPU s to idle, each run" in markdown and "sides alternating: before after after before" in markdown


def test_the_broker_cost_benchmark_measures_each_request_kind() -> None:
    from bench import brokercost
    from bench.common import bench_stack

    with bench_stack(f"brokercost-smoke-{os.getpid()}") as bench:
        bench.make_operator_instant()
        result = brokercost.measure(bench, bench.namespace("bench"), 4, concurrency=2)
    assert result["failed"] == 0 and set(result["phases"]) == set(brokercost.PHASES)
    for phase in brokercost.PHASES:
        measured = result["phases"][phase]
        assert measured["requests"] == 4 and measured["broker_cpu_ms_per_request"] >= 0
        # Each OSB request reads or writes something (the audit log attributes it to the broker).
        assert measured["broker_api_requests_per_request"] >= 1, measured
    # A poll is one GET of its object; a bind creates the binding and queues it (besides its reads; a queueing
    # the controller overtook is written again, without the state).
    assert result["phases"]["instance_last_operation"]["broker_api_requests"] == {"get sfserviceinstances": 4}
    bind = result["phases"]["bind"]["broker_api_requests"]
    assert bind["create sfservicebindings"] == 4 and bind["patch sfservicebindings/status"] >= 4
    assert "| provision |" in "\n".join(brokercost.markdown(result))
