"""The benchmark harness itself works (tiny sizes; the figures come from scripts/bench.sh)."""

from __future__ import annotations

from bench import run


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
