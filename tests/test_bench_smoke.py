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
