"""The shard projection (issue 46, ``bench/projection.py``): its arithmetic on hand-made figures, its sizing at a
boundary, and its loader on a recorded compare run — a figure missing is named, never read as zero."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from bench import projection
from bench.projection import Assumptions, Figure, Measured, MissingFigure, project, smallest_shards

pytestmark = pytest.mark.unit

RECORDED = Path(__file__).resolve().parents[2] / "bench" / "results" / "compare-2026-12-05T062749Z.json"


def measured(**changes: float) -> Measured:
    """Round figures: 10 ms controller, 2 ms broker, 40 ms API server per instance; bindings cost 20/4/60 ms; a
    restart over 1 000 objects took 11 CPU s and 21 s to idle (1 and 1 of them the empty controller's), holding
    16 KiB per object over an empty controller of 100 MiB."""
    values = {
        "provisioned": 1000.0,
        "controller_ms_per_instance": 10.0,
        "broker_ms_per_instance": 2.0,
        "apiserver_ms_per_instance": 40.0,
        "writes_per_instance": 7.0,
        "controller_ms_per_binding": 20.0,
        "broker_ms_per_binding": 4.0,
        "apiserver_ms_per_binding": 60.0,
        "writes_per_binding": 8.0,
        "restart_objects": 1000.0,
        "kib_per_object": 16.0,
        "restart_cpu_seconds": 11.0,
        "restart_idle_seconds": 21.0,
        "empty_rss_mib": 100.0,
        "empty_cpu_seconds": 1.0,
        "empty_idle_seconds": 1.0,
    } | changes
    return Measured(run="hand-made", **{name: Figure.given(value) for name, value in values.items()})


#: One operation per object per day, nothing idle: the CPU is the measured per-operation cost alone.
PLAIN = Assumptions(bindings_per_instance=1.0, resync_ms_per_instance_per_pass=0.0, quiet_cores_per_process=0.0)


def test_one_shard_is_the_measured_costs_times_the_objects() -> None:
    p = project(measured(), PLAIN, 86_400, 1)  # one operation per second of each kind
    assert p.objects == 2 * 86_400
    assert p.controller_cores_per_shard == pytest.approx((10 + 20) / 1000)
    assert p.controller_cores_total == pytest.approx(p.controller_cores_per_shard)
    assert p.broker_cores == pytest.approx((2 + 4) / 1000)
    assert p.apiserver_cores == pytest.approx((40 + 60) / 1000)
    assert p.writes_per_second == pytest.approx(7 + 8)
    assert p.ratio == pytest.approx((10 + 20 + 2 + 4) / (40 + 60))
    assert p.rss_mib_per_shard == pytest.approx(100 + 16 * 2 * 86_400 / 1024)
    # The restart's own size reproduces the restart measured.
    again = project(measured(), PLAIN, 500, 1)  # 1 000 objects
    assert (again.restart_cpu_seconds_per_shard, again.restart_idle_seconds_per_shard) == pytest.approx((11, 21))


def test_memory_per_shard_falls_with_m_but_never_below_the_empty_controller() -> None:
    rss = [project(measured(), PLAIN, 1_000_000, m).rss_mib_per_shard for m in (1, 2, 4, 8, 1024)]
    assert rss == sorted(rss, reverse=True) and len(set(rss)) == len(rss)
    shared = 16 * 2_000_000 * (1 - PLAIN.memory_divisible) / 1024  # every shard's part of the unsharded kinds
    assert rss[-1] > 100 + shared
    assert projection.floor(measured(), PLAIN, 1_000_000)[0] == pytest.approx(100 + shared)
    everything_sharded = dataclasses.replace(PLAIN, memory_divisible=1.0)
    tiny = project(measured(), everything_sharded, 10, 1_000).rss_mib_per_shard
    assert 100 < tiny < 100.01


def test_the_unsharded_part_is_paid_by_every_shard() -> None:
    one, four = (project(measured(), PLAIN, 1_000_000, m) for m in (1, 4))
    cpu = PLAIN.cpu_divisible
    assert four.controller_cores_per_shard == pytest.approx(one.controller_cores_per_shard * (cpu / 4 + 1 - cpu))
    assert four.controller_cores_total > one.controller_cores_total
    assert four.ratio > one.ratio
    restart = PLAIN.restart_divisible
    assert four.restart_idle_seconds_per_shard - 1 == pytest.approx(
        (one.restart_idle_seconds_per_shard - 1) * (restart / 4 + 1 - restart)
    )


def test_the_api_server_and_the_broker_do_not_divide_by_m() -> None:
    loads = {(p.apiserver_cores, p.broker_cores, p.writes_per_second) for m in (1, 3, 32)
             for p in [project(measured(), PLAIN, 1_000_000, m)]}  # fmt: skip
    assert len(loads) == 1


def test_the_sizing_takes_the_first_m_within_both_limits() -> None:
    # 1 MiB per object, all of it sharded, no bindings: 400 objects are 100 + 400 / M MiB per shard, and a restart
    # 1 + 20 ms * 400 / M seconds to idle.
    figures = measured(kib_per_object=1024.0)
    sharded = dataclasses.replace(PLAIN, bindings_per_instance=0.0, memory_divisible=1.0, restart_divisible=1.0)

    def fewest(assumptions: Assumptions, memory: float, restart: float) -> int | None:
        return smallest_shards(figures, assumptions, 400, memory_limit_mib=memory, restart_limit_seconds=restart)

    assert fewest(sharded, 200.0, 1_000.0) == 4  # exactly 200 MiB at M = 4
    assert fewest(sharded, 199.99, 1_000.0) == 5
    assert fewest(sharded, 10_000.0, 3.0) == 4  # the restart's bound, when it is the tighter: exactly 3 s at M = 4
    assert fewest(sharded, 10_000.0, 2.99) == 5
    assert fewest(sharded, 200.0, 2.99) == 5  # both: the larger M of the two
    # Past what every shard holds whatever M is (100 + 200 MiB): no M.
    assert fewest(dataclasses.replace(sharded, memory_divisible=0.5), 299.0, 1_000.0) is None
    assert projection.sizing(figures, sharded, [400, 800], projection.Limits(200.0, 1_000.0)) == [(400, 4), (800, 8)]


def test_the_loader_reads_a_recorded_compare_runs_after_side() -> None:
    found = projection.load(RECORDED)
    after = json.loads(RECORDED.read_text())["compare"]["after"]
    cpu = after["provisioning"]["1000"]["cpu_seconds_by_process"]
    assert found.controller_ms_per_instance.value == pytest.approx(cpu["controller"])  # over 1 000 instances
    assert found.apiserver_ms_per_instance.value == pytest.approx(cpu["kube-apiserver"])
    assert found.kib_per_object.value == after["restart"]["memory_per_object_kib"]
    assert found.empty_rss_mib.value == after["restart"]["empty"]["rss_mib"]
    assert "compare.after.restart.restart.idle_seconds" in found.restart_idle_seconds.source


def test_a_missing_figure_is_named(tmp_path: Path) -> None:
    results = json.loads(RECORDED.read_text())
    del results["compare"]["after"]["restart"]["memory_per_object_kib"]
    broken = tmp_path / "compare-2026-12-06T000000Z.json"
    broken.write_text(json.dumps(results))
    with pytest.raises(MissingFigure, match=r"compare-2026-12-06T000000Z\.json: no number at "
                                            r"compare\.after\.restart\.memory_per_object_kib"):  # fmt: skip
        projection.load(broken)
    # The newest file with every figure is taken: the older, whole one.
    (tmp_path / RECORDED.name).write_text(RECORDED.read_text())
    assert projection.newest(tmp_path)[0].name == RECORDED.name


def test_the_cli_fails_naming_the_missing_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    results = json.loads(RECORDED.read_text())
    del results["compare"]["after"]["bindings"]["cpu_seconds_by_process"]["broker"]
    broken = tmp_path / "compare.json"
    broken.write_text(json.dumps(results))
    assert projection.main(["--results", str(broken)]) == 2
    assert "compare.after.bindings.cpu_seconds_by_process.broker" in capsys.readouterr().err
    assert projection.main(["--results", str(RECORDED), "--shards", "1,4"]) == 0
    assert "| 4 | 500 000 |" in capsys.readouterr().out
