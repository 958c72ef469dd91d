"""RELIABILITY.md: the human summary of a reliability run (bench/reliability.py), written from its results.

``python -m bench.report bench/results/reliability-<date>.json`` writes it again from a results file.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _violations(result: dict[str, Any]) -> int | str:
    if "harness_error" in result:
        return "harness error"
    return int(result.get("violations", 0))


def _convergence(result: dict[str, Any]) -> str:
    convergence = result.get("convergence") or {}
    if not convergence:
        return "-"
    if convergence.get("converged"):
        return f"converged {convergence['seconds_after_last_fault']:.1f} s after the last fault"
    return f"NOT converged ({convergence.get('violation_count')} differences after {convergence.get('seconds'):.0f} s)"


def _workload_line(result: dict[str, Any]) -> str:
    workload = result.get("workload") or {}
    final = result.get("expected_final") or {}
    answers = workload.get("answers") or {}
    retries = sum((workload.get("retries") or {}).values())
    return (
        f"{sum(answers.values())} OSB requests ({retries} repeated after a 5xx or transport error); "
        f"final: {final.get('live_instances')} live instances, {final.get('deprovisioned_instances')} "
        f"deprovisioned, {final.get('live_bindings')} live bindings, {final.get('unbound_bindings')} unbound"
    )


def _fault_section(title: str, result: dict[str, Any], faults: str) -> list[str]:
    lines = [f"### {title}", ""]
    if "harness_error" in result:
        return [*lines, f"The harness failed: `{result['harness_error']}`", ""]
    lines += [
        f"* Parameters: {result['parameters']}",
        f"* Faults: {faults}",
        f"* Workload: {result['instances']} instances, {_workload_line(result)}; "
        f"took {result['workload']['seconds']} s",
        f"* Outcome: {_convergence(result)}; violations: **{_violations(result)}**",
    ]
    repairs = result.get("demo_operator_repairs") or []
    if repairs:
        lines.append(
            f"* Demo operator stalls repaired by the harness: {len(repairs)} (a Database left `Creating` for good; "
            "see Findings — not opbroker's doing)"
        )
    recovery = result.get("after_a_manual_controller_restart")
    if recovery:
        lines.append(
            "* After restarting the controller by hand: "
            + (f"converged in {recovery['seconds']} s" if recovery["converged"] else "still NOT converged")
        )
    log = result.get("controller_log") or {}
    if log:
        lines.append(
            f"* Controller log: {log.get('error_lines')} ERROR lines, {log.get('tracebacks')} tracebacks; "
            f"started without opbroker's resources {log.get('started_without_our_resources')}x"
        )
    for exit_ in result.get("process_exits") or []:
        lines.append(
            f"* **{exit_['process']} exited by itself** (exit code {exit_['exit_code']}) at {exit_['t']} s; restarted"
        )
    probe = result.get("not_ready_probe")
    if probe:
        after = probe["after"]["convergence"]
        lines.append(
            f"* Not-ready probe: the controller pointed for {probe['seconds']} s at a server answering `404 page not "
            f"found` (a kube-apiserver before its CRD handlers are up; {probe['requests_answered_404']} requests), "
            f"then back: exits {probe['controller_exits']}, "
            f"process alive {probe['controller_process_alive_after_window']}; a 10-instance run afterwards "
            + (
                "converged"
                if after.get("converged")
                else f"did NOT converge ({after.get('violation_count')} differences)"
            )
            + f"; violations: **{probe['violations']}**"
        )
    problems = (result.get("workload") or {}).get("problems") or []
    differences = (result.get("convergence") or {}).get("violations") or []
    for item in [*problems[:10], *differences[:10]]:
        lines.append(f"  * `{item}`")
    return [*lines, ""]


def _conflicts(result: dict[str, Any]) -> list[str]:
    lines = ["### 4. Concurrent conflicting OSB requests", ""]
    if "harness_error" in result:
        return [*lines, f"The harness failed: `{result['harness_error']}`", ""]
    race = result.get("bind_deprovision_race") or {}
    resource = result.get("resource_check") or {}
    lines += [
        f"* Parameters: {result['parameters']}",
        f"* {result['requests']} requests in two rounds ({result['requests_per_round']}), every request of an id "
        f"released at once; 5xx or transport errors: **{result['server_errors']}**",
        f"* Answers: {', '.join(f'{k}: {v}' for k, v in result['answers'].items())}",
        f"* Answer/state violations: **{len(result['answer_violations'])}**; resource check: "
        + ("converged" if resource.get("converged") else f"{resource.get('violation_count')} differences"),
    ]
    for item in result["answer_violations"][:12]:
        lines.append(f"  * `{item}`")
    lost = result.get("binds_that_lost_a_race_and_failed") or []
    if lost:
        lines.append(
            f"* Binds accepted together with their instance's deprovision, then reported `failed` by "
            f"`last_operation` and removed (consistent, see Findings): {len(lost)}"
        )
    if race:
        check = race.get("resource_check") or {}
        lines += [
            f"* Bind-vs-deprovision race probe: {race['trials']} trials ({race['outcomes']}); both accepted "
            f"(202/202) in **{race['both_accepted']}**; then `last_operation`: "
            f"{race.get('last_operation_after_both_accepted')}; instances left stuck deleting: "
            f"**{race['stuck_deleting_instances']}**; resource check: "
            + ("converged" if check.get("converged") else f"{check.get('violation_count')} differences")
            + f"; violations: **{race.get('violations')}**",
        ]
        for item in (check.get("violations") or [])[:6]:
            lines.append(f"  * `{item}`")
    again = result.get("recreate_probe") or {}
    if again:
        lines.append(
            f"* Re-create probe (deprovision, then provision the same id while the old registry Secret still "
            f"exists): {again['trials']} trials, new incarnations left without a registry Secret of their own: "
            f"**{again['without_own_registry']}**"
        )
    return [*lines, ""]


def _fuzz(result: dict[str, Any]) -> list[str]:
    lines = ["### 5. Fuzzing", ""]
    if "harness_error" in result:
        return [*lines, f"The harness failed: `{result['harness_error']}`", ""]
    broker, renderer = result["broker"], result["renderer"]
    lines += [
        f"* Broker (schemathesis, {broker['seconds']} s): {broker['requests']} requests over {broker['operations']} "
        f"operations, status codes {broker['status_codes']}; 5xx: **{broker['server_errors']}**, failed checks: "
        f"**{broker['failed_checks']}**; broker alive afterwards: {broker['broker_alive_after']}",
    ]
    for kind, count in list(broker["failure_kinds"].items())[:8]:
        lines.append(f"  * {count}x `{kind}`")
    if renderer.get("hang"):
        lines.append(
            f"* Renderer: **HANG** — the fuzz process outlived its time; last input: `{renderer.get('input')}`"
        )
    elif "harness_error" in renderer:
        lines.append(f"* Renderer: harness error `{renderer['harness_error'][-300:]}`")
    else:
        lines.append(
            f"* Renderer (hypothesis, {renderer['seconds']} s): {renderer['inputs']} random templates "
            f"({renderer['by_action']}), outcomes {renderer['outcomes']}; crashes (not a RenderError): "
            f"**{renderer['crash_count']}**; renders over the {renderer['time_limit_s']} s limit (+1.5 s): "
            f"**{len(renderer['renders_over_limit'])}**; longest {renderer['longest_render_s']} s"
        )
        for crash in renderer["crashes"][:5]:
            lines.append(f"  * `{crash['error']}`")
    return [*lines, ""]


def _findings(report: dict[str, Any]) -> list[str]:
    found = []
    scenarios = report["scenarios"]
    race = (scenarios.get("conflicts") or {}).get("bind_deprovision_race") or {}
    if race.get("both_accepted") and race.get("stuck_deleting_instances"):
        found.append(
            "* **Broker: bind and deprovision race (check-then-act).** A bind and a deprovision of the same "
            f"succeeded instance sent at the same moment were both answered 202 in {race['both_accepted']} of "
            f"{race['trials']} trials, and {race['stuck_deleting_instances']} instances were left deleting and "
            '`failed` ("cannot deprovision: 1 binding(s) still exist"), their bindings `failed` — until the '
            "platform unbinds. Deprovision counts the bindings, then marks the instance `delete`; bind reads the "
            "instance (not deleting), then creates the binding: neither sees the other."
        )
    elif race.get("both_accepted"):
        found.append(
            "* **Broker: bind and deprovision race (check-then-act), now resolved consistently downstream.** A bind "
            f"and a deprovision of one instance sent at the same moment are still both answered 202 "
            f"({race['both_accepted']} of {race['trials']} trials): deprovision counts the bindings, then marks "
            "the instance `delete`; bind reads the instance, then creates the binding, and neither sees the other. "
            "The controller now removes the never-completed binding, so the deprovision completes and the bind's "
            f"`last_operation` reports `failed` ({race.get('last_operation_after_both_accepted')}); stuck "
            f"instances: {race['stuck_deleting_instances']}. OSB would rather have the bind refused at once "
            "(422 ConcurrencyError)."
        )
    again = (scenarios.get("conflicts") or {}).get("recreate_probe") or {}
    if again.get("without_own_registry"):
        found.append(
            "* **Controller: an instance provisioned again under the same id adopts the previous incarnation's "
            "registry.** When the old registry Secret (owned by the deleted incarnation) still exists at the new "
            "incarnation's first reconcile, the controller reads its values, finds them equal to what it renders, "
            "and skips the write; the garbage collector then deletes the Secret, and the new instance has no "
            f"registry ({again['without_own_registry']} of {again['trials']} trials). Generated values (passwords) "
            "would be inherited from the old incarnation and regenerated after a controller restart."
        )
    repairs = sum(len((s or {}).get("demo_operator_repairs") or []) for s in scenarios.values())
    if repairs:
        found.append(
            "* **Demo operator: a Database can stay `Creating` for ever.** It becomes `Running` from an in-memory "
            "`threading.Timer`; when the timer's API call fails (the API server restarting) the thread dies and "
            "nothing ever retries (a relist sees phase `Creating` and does nothing; a restarted operator neither). "
            f"The harness reset such Databases {repairs} time(s) so opbroker's own convergence could be measured."
        )
    probe = (scenarios.get("cuts") or {}).get("not_ready_probe") or {}
    exits = [e for key in ("kills", "apiserver", "cuts") for e in (scenarios.get(key) or {}).get("process_exits") or []]
    logs = [(scenarios.get(key) or {}).get("controller_log") or {} for key in ("kills", "apiserver", "cuts")]
    blind = sum(log.get("started_without_our_resources", 0) for log in logs)
    if probe.get("violations") or blind:
        found.append(
            "* **Controller: a few seconds of `404 page not found` from the API server stop it for good.** That is "
            "what a kube-apiserver answers for custom resources just after it starts, before its CRD handlers are "
            "installed; nothing reconciles any more: the process either exits or stays up idle. Not-ready probe: "
            f"{probe.get('controller_exits')} exit(s), "
            f"process alive afterwards {probe.get('controller_process_alive_after_window')}, a later run converged "
            f"{(probe.get('after') or {}).get('convergence', {}).get('converged')}; in the scenario logs (the probe "
            f"included): {len(exits)} exit(s) during the fault runs. Its twin: a controller "
            "(re)started while the API "
            'server is starting finds no CRDs in discovery ("Unresolved resources cannot be served") and never '
            f"watches them, staying up and idle for good ({blind}x in this run)."
        )
    if exits and not (probe.get("violations") or blind):
        found.append(
            f"* Controller (by design, not a failure): it exited non-zero {len(exits)} time(s) during the fault runs "
            f"(the not-ready probe: {probe.get('controller_exits')}) — when it gives up on a starting "
            "API server's `404`s, the process exits and its supervisor (the pod's restart policy; here the "
            "harness) starts it again; it then waits until the API serves our resources. Every run converged."
        )
    api = scenarios.get("apiserver") or {}
    tracebacks = (api.get("controller_log") or {}).get("tracebacks", 0)
    if tracebacks > 50:
        found.append(
            f"* Controller (noise, not a failure): during {api.get('restarts')} API server restarts it logged "
            f"{tracebacks} tracebacks — every reconcile that meets a refused connection is logged at ERROR with a "
            "full traceback, though it is retried and the run converged."
        )
    return found or ["* None in this run."]


#: scenario → (its row in the summary table, its section title)
TITLES = {
    "kills": ("1. controller SIGKILLed", "1. Controller killed at random points"),
    "apiserver": ("2. kube-apiserver restarted", "2. API server restarted mid-run"),
    "cuts": ("3. connections cut", "3. Watch and request connections dropped"),
}
FAULTS: dict[str, Callable[[dict[str, Any]], str]] = {
    "kills": lambda r: f"{r.get('kills')} SIGKILLs + restarts",
    "apiserver": lambda r: f"{r.get('restarts')} restarts ({r.get('restart_seconds_until_ready')} s until ready)",
    "cuts": lambda r: f"{r.get('cuts')} cuts, {r.get('connections_cut')} connections dropped",
}
DETAILS: dict[str, Callable[[dict[str, Any]], str]] = {
    "kills": lambda r: (
        f"{r.get('kills')} SIGKILLs of the controller, each {r.get('kill_delay_s')} s (uniform) after the previous "
        f"restart; {r.get('kills_with_work_pending')} of them with instances or bindings mid-operation "
        f"(per kill: {r.get('work_pending_at_kill')})"
    ),
    "apiserver": lambda r: (
        f"{r.get('restarts')} in-place restarts of kube-apiserver (`ControlPlane.restart_apiserver`), at random "
        f"moments of the windows {r.get('restart_windows_s')} s; seconds until ready again: "
        f"{r.get('restart_seconds_until_ready')}"
    ),
    "cuts": lambda r: (
        f"{r.get('cuts')} cuts of every controller-API server connection (TCP proxy, TLS passed through), every "
        f"{r.get('cut_interval_s')} s; {r.get('connections_cut')} connections dropped, "
        f"{r.get('proxy_connections_accepted')} opened"
    ),
}


def markdown(report: dict[str, Any], *, json_name: str) -> str:
    machine = report["machine"]
    scenarios = report["scenarios"]
    lines = [
        "# Reliability",
        "",
        f"Run of `scripts/reliability.sh{' --quick' if report['quick'] else ''}` on {machine['date']} — "
        f"{machine['cpus']} CPUs, {machine['memory_gib']} GiB, Python {machine['python']}, kernel {machine['kernel']}; "
        f"{report['total_seconds']:.0f} s in all. Full results: `bench/results/{json_name}`.",
        "",
        "Each scenario runs on a fresh local stack (etcd, kube-apiserver and kube-controller-manager 1.20, the demo "
        "operator, the controller with 8 workers, the broker), every request on 127.0.0.1. Scenarios 1 to 3 provision "
        "through OSB — 70 % kept, 15 % deprovisioned at once (while the controller works on them), 15 % after they "
        "succeeded, one in ten kept instances bound and half of those unbound — and end with the convergence check: "
        "every kept instance `succeeded` for its generation with the finalizer exactly once and `status.resources` "
        "matching what exists; exactly one Database per live instance (by name and owner reference) with exactly the "
        "users of its live bindings; every live binding's credentials Secret; nothing left of anything removed; no "
        'Database, registry or credentials Secret, operator Secret or Service without a live owner. "Converged N s '
        'after the last fault": from the end of the last fault to the first passing check, which runs once the '
        "workload's last OSB operation has finished (the platform polls `last_operation`, and repeats a request "
        "answered 5xx, as Cloud Foundry does).",
        "",
        "| scenario | faults injected | outcome | violations |",
        "|---|---|---|---|",
    ]
    for key, (title, _) in TITLES.items():
        if key in scenarios:
            result = scenarios[key]
            shown = FAULTS[key](result) if "harness_error" not in result else "-"
            outcome = _convergence(result)
            if (result.get("not_ready_probe") or {}).get("violations"):
                outcome += "; not-ready probe: the controller stopped reconciling"
            if result.get("process_exits"):
                outcome += f"; {len(result['process_exits'])} process exit(s)"
            lines.append(f"| {title} | {shown} | {outcome} | {_violations(result)} |")
    if "conflicts" in scenarios:
        result = scenarios["conflicts"]
        if "harness_error" not in result:
            race = result.get("bind_deprovision_race") or {}
            again = result.get("recreate_probe") or {}
            lines.append(
                f"| 4. conflicting OSB requests | {result['requests']} concurrent requests + {race.get('trials')} "
                f"bind/deprovision races + {again.get('trials')} re-creations | {result['server_errors']} 5xx; "
                f"{len(result['answer_violations'])} answers off OSB or off the final state; race accepted both "
                f"{race.get('both_accepted')}x (then consistent: {race.get('violations') == 0}); re-created "
                f"instances without their own registry: {again.get('without_own_registry')} | {result['violations']} |"
            )
    if "fuzz" in scenarios and "harness_error" not in scenarios["fuzz"]:
        broker, renderer = scenarios["fuzz"]["broker"], scenarios["fuzz"]["renderer"]
        lines.append(
            f"| 5. fuzzing | {broker['requests']} broker requests, {renderer.get('inputs', '?')} templates | "
            f"{broker['server_errors']} 5xx, {broker['failed_checks']} failed checks; "
            f"{renderer.get('crash_count', '?')} renderer crashes, hang: {renderer.get('hang')} | "
            f"{broker['server_errors'] + broker['failed_checks'] + int(renderer.get('crash_count') or 0)} |"
        )
    lines += ["", "## Scenarios", ""]
    for key, (_, title) in TITLES.items():
        if key in scenarios:
            lines += _fault_section(title, scenarios[key], DETAILS[key](scenarios[key]))
    if "conflicts" in scenarios:
        lines += _conflicts(scenarios["conflicts"])
    if "fuzz" in scenarios:
        lines += _fuzz(scenarios["fuzz"])
    lines += [
        "## Findings",
        "",
        *_findings(report),
        "",
        "## Reproduce",
        "",
        "```sh",
        "scripts/reliability.sh            # every scenario (7 to 15 minutes on 2 cores)",
        "scripts/reliability.sh --quick    # small versions (a few minutes)",
        "scripts/reliability.sh --only kills --only conflicts",
        "```",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    results = Path(sys.argv[1])
    summary = markdown(json.loads(results.read_text()), json_name=results.name)
    (results.parent / "RELIABILITY.md").write_text(summary)


if __name__ == "__main__":
    main()
