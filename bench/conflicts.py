"""Scenario 4: the broker under concurrent, conflicting requests for the same ids.

For each of ``ids`` instance ids, every request of a round is released at once (one barrier per id). Round
1 races the creation: identical provisions (body A, organization ``org-a``), conflicting provisions (body
B, ``org-b``), two conflicting updates, a bind and, for two thirds of the ids, a deprovision. Round 2,
once everything settled: identical and conflicting provisions, conflicting updates (version 14 against
15), identical and conflicting binds (two thirds of the ids) and deprovisions (two thirds; with
``overlap`` one third gets binds and deprovisions together).

Nothing is retried: every answer is recorded with the operation token it carried (decoded: which object
— uid — and which update generation it names). Afterwards the answers are checked against OSB and against
each other, and the final state in Kubernetes against the answers (see :func:`check`); the broker's own
``create`` calls are counted from the audit log, so "exactly one provision won" is checked by the API
server's word, not the broker's. :func:`race_probe` isolates the one race the storm found.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any

import httpx
from kubernetes import client

from bench import invariants
from bench.common import Bench
from bench.workload import converge
from opbroker.api.conventions import DEFAULT_NAMESPACE
from opbroker.broker.operations import Token

BODIES = {"A": "org-a", "B": "org-b"}
START_VERSION = "16"
ALLOWED: dict[str, dict[int, frozenset[str | None]]] = {
    "provision": {200: frozenset({None}), 202: frozenset({None}), 409: frozenset({"Conflict"}),
                  422: frozenset({"ConcurrencyError"})},
    "update": {200: frozenset({None}), 202: frozenset({None}), 400: frozenset({"InstanceDoesNotExist"}),
               422: frozenset({"ConcurrencyError"})},
    "deprovision": {202: frozenset({None}), 410: frozenset({None}),
                    422: frozenset({"BindingsExist", "ConcurrencyError"})},
    "bind": {200: frozenset({None}), 202: frozenset({None}), 400: frozenset({"InstanceDoesNotExist"}),
             409: frozenset({"Conflict"}), 422: frozenset({"ConcurrencyError"})},
}  # fmt: skip


@dataclass
class Answer:
    round: int
    id: str
    op: str
    variant: str
    status: int = 0
    error: str | None = None
    uid: str | None = None
    generation: int | None = None
    operation: str | None = None
    seconds: float = 0.0
    transport_error: str | None = None


def _requests(
    round_: int, ids: list[str], rng: random.Random, *, overlap: bool, recreate: bool
) -> list[tuple[str, list[tuple[str, str]]]]:
    """(id, [(op, variant), ...]) for one round; variants: provision A/B, update 14/15, bind same/other.

    With ``overlap``, a third of the ids get binds and deprovisions in the same round 2 (the race probe's
    subject); without, the ids are bound or deprovisioned, never both. Without ``recreate``, no id gets
    provisions and deprovisions in the same round (so none is deprovisioned and created again at once).
    """
    plan = []
    for index, instance in enumerate(ids):
        removing = index % 3 == 0 or (overlap and index % 3 == 1)
        binding = index % 3 in (1, 2)
        if round_ == 1:
            ops = [("provision", "A")] * 6 + [("provision", "B")] * 3 + [("update", "14"), ("update", "15")]
            ops += [("bind", "same")] + ([("deprovision", "-")] if removing and recreate else [])
        else:
            winner = rng.choice("AB")
            loser = "B" if winner == "A" else "A"
            provisions = recreate or not removing
            ops = [("provision", winner)] * 3 + [("provision", loser)] * 2 if provisions else []
            ops += [("update", "14"), ("update", "15"), ("update", "14"), ("update", "15")]
            ops += [("bind", "same")] * 3 + [("bind", "other")] if binding else []
            ops += [("deprovision", "-")] * 2 if removing else []
        rng.shuffle(ops)
        plan.append((instance, ops))
    return plan


def _send(
    http: httpx.Client, ids: tuple[str, str], namespace: str, instance: str, op: str, variant: str
) -> httpx.Response:
    service_id, plan_id = ids
    path = f"/v2/service_instances/{instance}"
    incomplete = {"accepts_incomplete": "true"}
    if op == "provision":
        body = {
            "service_id": service_id, "plan_id": plan_id, "organization_guid": BODIES[variant],
            "space_guid": "space", "context": {"platform": "kubernetes", "namespace": namespace},
            "parameters": {"version": START_VERSION},
        }  # fmt: skip
        return http.put(path, params=incomplete, json=body)
    if op == "update":
        return http.patch(path, params=incomplete, json={"service_id": service_id, "parameters": {"version": variant}})
    if op == "deprovision":
        return http.delete(path, params={**incomplete, "service_id": service_id, "plan_id": plan_id})
    body = {"service_id": service_id, "plan_id": plan_id, "parameters": {"variant": variant}}
    return http.put(f"{path}/service_bindings/{instance}-b", params=incomplete, json=body)


def _round(
    bench: Bench, namespace: str, round_: int, ids: list[str], rng: random.Random, *, overlap: bool, recreate: bool
) -> list[Answer]:
    answers: list[Answer] = []
    lock = threading.Lock()
    plan = _requests(round_, ids, rng, overlap=overlap, recreate=recreate)
    width = max(len(ops) for _, ops in plan)
    with bench.osb(64) as http, ThreadPoolExecutor(max(64, width)) as pool:
        catalog_ids = bench.plan_ids()

        def fire(instance: str, op: str, variant: str, barrier: threading.Barrier) -> None:
            answer = Answer(round_, instance, op, variant)
            barrier.wait(timeout=60)
            started = time.perf_counter()
            try:
                response = _send(http, catalog_ids, namespace, instance, op, variant)
            except httpx.HTTPError as exc:
                answer.transport_error = f"{type(exc).__name__}: {exc}"
            else:
                answer.status = response.status_code
                body = response.json() if response.content else {}
                answer.error = body.get("error") if isinstance(body, dict) else None
                if isinstance(body, dict) and body.get("operation"):
                    token = Token.decode(body["operation"])
                    answer.uid, answer.generation = token.uid, token.generation
                    answer.operation = body["operation"]
            answer.seconds = round(time.perf_counter() - started, 3)
            with lock:
                answers.append(answer)

        futures = []
        for instance, ops in plan:
            barrier = threading.Barrier(len(ops))
            futures += [pool.submit(fire, instance, op, variant, barrier) for op, variant in ops]
        for future in futures:
            future.result()
    return answers


def _settle(api: client.ApiClient, namespace: str, timeout: float) -> float:
    """Wait until every instance and binding has an outcome (or is stuck failed while deleting)."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        snap = invariants.snapshot(api, namespace)
        if all(
            (o.get("status") or {}).get("state") == "failed"
            or ((o.get("status") or {}).get("state") == "succeeded" and not o["metadata"].get("deletionTimestamp"))
            for o in [*snap.instances, *snap.bindings]
        ):
            return round(time.monotonic() - started, 2)
        time.sleep(1.0)
    return -1.0


def _bind_outcomes(bench: Bench, answers: list[Answer], snap: invariants.Snapshot) -> dict[str, str]:
    """binding uid → what ``last_operation`` (with the bind's token) says, for accepted binds now gone."""
    present = {b["metadata"]["uid"] for b in snap.bindings}
    asked: dict[str, str] = {}
    with bench.osb(8) as http:
        for a in answers:
            if a.op != "bind" or a.status != 202 or a.uid in present or a.uid in asked or a.operation is None:
                continue
            path = f"/v2/service_instances/{a.id}/service_bindings/{a.id}-b/last_operation"
            response = http.get(path, params={"operation": a.operation})
            asked[str(a.uid)] = (
                str(response.json().get("state")) if response.status_code == 200 else str(response.status_code)
            )
    return asked


def _broker_creates(bench: Bench, offset: int, namespace: str) -> Counter[tuple[str, str]]:
    """(plural, name) → how many times the broker's create of it succeeded (HTTP 201), from the audit log."""
    return _broker_calls(bench, offset, namespace, "create", {201})


def _broker_deletes(bench: Bench, offset: int, namespace: str) -> Counter[tuple[str, str]]:
    """(plural, name) → how many times the broker's DELETE of it succeeded, from the audit log. This scenario
    sends no unbind, so a DELETE of a binding is the broker withdrawing one whose bind lost a race."""
    return _broker_calls(bench, offset, namespace, "delete", {200, 202})


def _broker_calls(bench: Bench, offset: int, namespace: str, verb: str, codes: set[int]) -> Counter[tuple[str, str]]:
    created: Counter[tuple[str, str]] = Counter()
    with bench.audit.path.open("rb") as handle:
        handle.seek(offset)
        for line in handle:
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            ref = event.get("objectRef") or {}
            if (
                event.get("stage") == "ResponseComplete"
                and event.get("verb") == verb
                and str(event.get("userAgent", "")).startswith("opbroker-broker")
                and ref.get("namespace") == namespace
                and (event.get("responseStatus") or {}).get("code") in codes
            ):
                created[(ref.get("resource", ""), ref.get("name", ""))] += 1
    return created


def check(
    answers: list[Answer],
    created: Counter[tuple[str, str]],
    snap: invariants.Snapshot,
    bind_outcomes: dict[str, str] | None = None,
    deleted: Counter[tuple[str, str]] | None = None,
) -> tuple[list[str], invariants.Expected, list[str]]:
    """Every answer against OSB and against the others, and the final objects against the answers.

    ``deleted``: the broker's DELETEs (from the audit log); of bindings, these are withdrawals — a binding
    created, then removed because the bind, reading the instance again, found it marked by a deprovision or
    otherwise no longer bindable (each must match a bind refused with 422 ConcurrencyError).

    Returns the violations, what the answers promise about the namespace (for the resource check; objects
    already reported here are excluded from it, so one fault is one violation, not five), and the races
    that ended consistently: a bind accepted together with a deprovision, whose binding the controller
    removed and whose ``last_operation`` (``bind_outcomes``) reports ``failed``.
    """
    found: list[str] = []
    resolved: list[str] = []
    expected = invariants.Expected()
    for a in answers:
        allowed = ALLOWED[a.op].get(a.status)
        if a.transport_error or allowed is None or a.error not in allowed:
            found.append(
                f"{a.id}: round {a.round} {a.op} {a.variant} answered {a.status} {a.error} {a.transport_error or ''}"
            )
    instances = {o["metadata"]["name"]: o for o in snap.instances}
    bindings = {o["metadata"]["name"]: o for o in snap.bindings}
    for instance in sorted({a.id for a in answers}):
        mine = [a for a in answers if a.id == instance]
        fate = _check_instance(instance, mine, instances.get(instance), snap, created, found)
        if fate == "live":
            expected.live_instances.add(instance)
        elif fate == "gone":
            expected.gone_instances.add(instance)
        elif fate == "stuck":
            expected.excluded.add(instance)
        binding = f"{instance}-b"
        lost = _lost_binds(binding, mine, bindings.get(binding), fate, bind_outcomes or {}, resolved)
        kept = [a for a in mine if a.uid not in lost]
        withdrawn = (deleted or Counter())[("sfservicebindings", binding)]
        if not _check_binding(
            binding, kept, bindings.get(binding), created, found, lost=len(lost), withdrawn=withdrawn
        ):
            if binding in bindings:
                expected.excluded.add(binding)  # reported above
        else:
            if fate == "live":
                expected.live_bindings[binding] = instance
            else:
                found.append(
                    f"{binding}: accepted while its instance was {fate}; it exists, stuck: {_brief(bindings[binding])}"
                )
                expected.excluded.add(binding)
    return found, expected, resolved


def _lost_binds(
    binding: str,
    mine: list[Answer],
    final: dict[str, Any] | None,
    fate: str,
    outcomes: dict[str, str],
    resolved: list[str],
) -> set[str]:
    """Accepted binds that lost a race with the instance's deprovision and were reported ``failed``."""
    if fate != "gone":
        return set()
    final_uid = final["metadata"]["uid"] if final else None
    lost = {str(a.uid) for a in mine if a.op == "bind" and a.status == 202 and a.uid != final_uid}
    lost = {uid for uid in lost if outcomes.get(uid) == "failed"}
    resolved += [f"{binding}: bind {uid} accepted, then failed (its instance was deprovisioned)" for uid in lost]
    return lost


def _brief(obj: dict[str, Any]) -> str:
    status, deleting = obj.get("status") or {}, bool(obj["metadata"].get("deletionTimestamp"))
    return f"state={status.get('state')!r} error={status.get('error')!r} deleting={deleting}"


def _incarnations(answers: list[Answer], op: str, found: list[str], what: str) -> dict[str, str]:
    """uid → the body variant accepted (202) for it; two different bodies accepted for one uid is a violation."""
    accepted: dict[str, set[str]] = {}
    for a in answers:
        if a.op == op and a.status == 202:
            accepted.setdefault(str(a.uid), set()).add(a.variant)
    for uid, variants in accepted.items():
        if len(variants) != 1:
            found.append(f"{what}: {op}s with different bodies {sorted(variants)} all accepted for {uid}")
    return {uid: sorted(variants)[0] for uid, variants in accepted.items()}


def _check_instance(
    instance: str,
    mine: list[Answer],
    final: dict[str, Any] | None,
    snap: invariants.Snapshot,
    created: Counter[tuple[str, str]],
    found: list[str],
) -> str:
    """Check one instance id's answers and final object; its fate: live, gone, stuck, wrong or never."""
    winners = _incarnations(mine, "provision", found, instance)
    if created[("sfserviceinstances", instance)] != len(winners):
        found.append(
            f"{instance}: the broker created it {created[('sfserviceinstances', instance)]} times "
            f"but announced {len(winners)} incarnation(s) with 202"
        )
    won = set(winners.values())
    updates = [a for a in mine if a.op == "update" and a.status == 202]
    for a in mine:
        if a.op == "provision" and a.status == 200 and a.variant not in won:
            found.append(f"{instance}: provision {a.variant} answered 200 but body {a.variant} never won")
        if a.op == "provision" and a.status == 409 and won == {a.variant} and not updates:
            found.append(f"{instance}: identical provision {a.variant} refused with 409")
        if a.op == "update" and a.status == 200 and a.variant not in {u.variant for u in updates}:
            found.append(f"{instance}: update to {a.variant} answered 200 (nothing to change) but was never accepted")
    by_generation: dict[tuple[str, int | None], set[str]] = {}
    for a in updates:
        by_generation.setdefault((str(a.uid), a.generation), set()).add(a.variant)
    for (uid, generation), variants in by_generation.items():
        if len(variants) != 1:
            found.append(
                f"{instance}: conflicting updates {sorted(variants)} both accepted as generation {generation} of {uid}"
            )
    removed = {str(a.uid) for a in mine if a.op == "deprovision" and a.status == 202}
    final_uid = final["metadata"]["uid"] if final else None
    for uid in winners:
        if uid != final_uid and uid not in removed:
            found.append(f"{instance}: incarnation {uid} was accepted, never deprovisioned, and is gone")
    if final is None:
        return "gone" if winners else "never"
    if final_uid not in winners:
        found.append(f"{instance}: exists as {final_uid}, which no accepted provision created")
        return "stuck"
    if final_uid in removed:
        found.append(f"{instance}: deprovision of {final_uid} accepted (202), yet it exists: {_brief(final)}")
        return "stuck"
    spec = final.get("spec") or {}
    if spec.get("organizationGuid") != BODIES[winners[final_uid]]:
        found.append(f"{instance}: stored organization {spec.get('organizationGuid')!r}, accepted {winners[final_uid]}")
    last = max((a for a in updates if a.uid == final_uid), key=lambda a: a.generation or 0, default=None)
    version = last.variant if last else START_VERSION
    stored = (spec.get("parameters") or {}).get("version")
    if stored != version:
        found.append(f"{instance}: stored version {stored!r}, last accepted {version!r}")
    database = next((d for d in snap.databases if d["metadata"]["name"] == instance), None)
    if database is not None and str((database.get("spec") or {}).get("version")) != version:
        found.append(
            f"{instance}: Database version {(database.get('spec') or {}).get('version')!r}, accepted {version!r}"
        )
    return "live"


def _check_binding(
    binding: str,
    mine: list[Answer],
    final: dict[str, Any] | None,
    created: Counter[tuple[str, str]],
    found: list[str],
    *,
    lost: int = 0,
    withdrawn: int = 0,
) -> bool:
    """Check one binding id's answers and final object; whether it exists as accepted."""
    bound = _incarnations(mine, "bind", found, binding)
    if created[("sfservicebindings", binding)] != len(bound) + lost + withdrawn:
        found.append(
            f"{binding}: the broker created it {created[('sfservicebindings', binding)]} times "
            f"but announced {len(bound) + lost} with 202 and withdrew {withdrawn}"
        )
    refused = sum(1 for a in mine if a.op == "bind" and a.status == 422 and a.error == "ConcurrencyError")
    if withdrawn > refused:
        found.append(f"{binding}: the broker withdrew {withdrawn} binding(s) but refused only {refused} bind(s)")
    for a in mine:
        if a.op == "bind" and a.status == 409 and set(bound.values()) == {a.variant}:
            found.append(f"{binding}: identical bind {a.variant} refused with 409")
        if a.op == "bind" and a.status == 200 and a.variant not in set(bound.values()):
            found.append(f"{binding}: bind {a.variant} answered 200 but body {a.variant} never won")
    final_uid = final["metadata"]["uid"] if final else None
    for uid in bound:
        if uid != final_uid:
            found.append(f"{binding}: binding {uid} was accepted, never unbound, and is gone")
    if final is None:
        return False
    variant = ((final.get("spec") or {}).get("parameters") or {}).get("variant")
    if final_uid not in bound:
        found.append(f"{binding}: exists as {final_uid}, which no accepted bind created")
        return False
    if variant != bound[str(final_uid)]:
        found.append(f"{binding}: stored body {variant!r}, accepted {bound[str(final_uid)]!r}")
    return True


def run(
    bench: Bench,
    namespace: str,
    *,
    ids: int,
    seed: int,
    overlap: bool = True,
    recreate: bool = True,
    settle_timeout: float = 150.0,
) -> dict[str, Any]:
    rng = random.Random(seed)
    names = [f"c{seed % 10000:04d}-{index:02d}" for index in range(ids)]
    offset = bench.audit.path.stat().st_size if bench.audit.path.exists() else 0
    started = time.monotonic()
    answers = _round(bench, namespace, 1, names, rng, overlap=overlap, recreate=recreate)
    settled_1 = _settle(bench.api, namespace, settle_timeout)
    answers += _round(bench, namespace, 2, names, rng, overlap=overlap, recreate=recreate)
    settled_2 = _settle(bench.api, namespace, settle_timeout)
    time.sleep(1.0)  # the audit log is written asynchronously
    snap = invariants.snapshot(bench.api, namespace)
    outcomes = _bind_outcomes(bench, answers, snap)
    found, expected, resolved = check(
        answers,
        _broker_creates(bench, offset, namespace),
        snap,
        outcomes,
        _broker_deletes(bench, offset, namespace),
    )
    convergence = converge(bench, namespace, expected, timeout=60.0)
    histogram = Counter(f"round {a.round} {a.op} {a.status} {a.error or ''}".strip() for a in answers)
    return {
        "instance_ids": ids,
        "bind_and_deprovision_in_one_round": overlap,
        "provision_and_deprovision_in_one_round": recreate,
        "requests": len(answers),
        "requests_per_round": dict(Counter(f"round {a.round}" for a in answers)),
        "answers": dict(sorted(histogram.items())),
        "server_errors": sum(1 for a in answers if a.status >= 500 or a.transport_error),
        "settle_seconds": [settled_1, settled_2],
        "latency_max_s": max(a.seconds for a in answers),
        "final": {
            "instances": len(snap.instances),
            "bindings": len(snap.bindings),
            "live_expected": len(expected.live_instances),
            "deprovisioned": len(expected.gone_instances),
        },
        "answer_violations": found,
        "binds_that_lost_a_race_and_failed": resolved,
        "resource_check": convergence,
        "violations": len(found) + (0 if convergence["converged"] else convergence["violation_count"]),
        "seconds": round(time.monotonic() - started, 1),
        "sample_answers": [asdict(a) for a in answers[:5]],
    }


def race_probe(bench: Bench, namespace: str, *, trials: int, seed: int) -> dict[str, Any]:
    """Bind and deprovision one succeeded instance at the same moment, ``trials`` times (one instance each).

    OSB allows only one of the two (an instance with a binding is not deprovisioned: 422 BindingsExist; a
    binding for an instance being deprovisioned is refused: 422 ConcurrencyError); both refused is allowed
    (the platform retries), both accepted is a violation. Counted: how often each combination was answered;
    every answer off that list; ``last_operation`` of every accepted operation once things settled (the
    winner's must say ``succeeded``; for a pair both accepted, the bind should say ``failed`` and the
    deprovision ``succeeded``); instances left stuck deleting; and the resource check over the namespace: a
    refused bind leaves no binding, a refused deprovision leaves the instance live, whatever won exists (or
    is gone) with everything it owns.
    """
    names = [f"race{seed % 1000:03d}-{index:02d}" for index in range(trials)]
    service_id, plan_id = bench.plan_ids()
    outcomes: Counter[str] = Counter()
    tokens: dict[str, dict[str, str]] = {}
    winners: dict[str, tuple[str, str]] = {}
    off_osb: list[str] = []
    expected = invariants.Expected()
    # A bind that arrives once the deprovision has finished finds no instance: 400 InstanceDoesNotExist, right
    # only if it was.
    allowed: dict[str, dict[int, tuple[str | None, ...]]] = {
        "bind": {202: (None,), 400: ("InstanceDoesNotExist",), 422: ("ConcurrencyError",)},
        "deprovision": {202: (None,), 422: ("BindingsExist", "ConcurrencyError")},
    }
    with bench.osb(32) as http:
        for name in names:
            _send(http, (service_id, plan_id), namespace, name, "provision", "A").raise_for_status()
        _settle(bench.api, namespace, 120.0)

        def race(name: str) -> None:
            barrier = threading.Barrier(2)
            answered: dict[str, httpx.Response] = {}

            def go(op: str) -> None:
                barrier.wait(timeout=30)
                answered[op] = _send(http, (service_id, plan_id), namespace, name, op, "same")

            threads = [threading.Thread(target=go, args=(op,)) for op in ("bind", "deprovision")]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            bind, deprovision = answered["bind"], answered["deprovision"]
            outcomes[f"bind {bind.status_code} / deprovision {deprovision.status_code}"] += 1
            for op, response in answered.items():
                try:
                    body = response.json() if response.status_code != 202 else {}
                except ValueError:
                    body = {}
                error = body.get("error") if isinstance(body, dict) else None
                if error not in allowed[op].get(response.status_code, ("?",)):
                    off_osb.append(f"{name}: {op} answered {response.status_code} {response.text[:200]}")
            if bind.status_code == 400 and deprovision.status_code != 202:
                off_osb.append(f"{name}: bind answered 400 though the instance was not deprovisioned")
            if bind.status_code == 202 and deprovision.status_code == 202:
                tokens[name] = {"bind": bind.json()["operation"], "deprovision": deprovision.json()["operation"]}
            elif bind.status_code == 202:
                winners[name] = ("bind", bind.json()["operation"])
            elif deprovision.status_code == 202:
                winners[name] = ("deprovision", deprovision.json()["operation"])
            if deprovision.status_code == 202:
                expected.gone_instances.add(name)
            else:
                expected.live_instances.add(name)
                if bind.status_code == 202:
                    expected.live_bindings[f"{name}-b"] = name

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(race, names))
        _settle(bench.api, namespace, 60.0)

        def polled(name: str, op: str, operation: str) -> str:
            path = f"/{name}/service_bindings/{name}-b" if op == "bind" else f"/{name}"
            response = http.get(f"/v2/service_instances{path}/last_operation", params={"operation": operation})
            return str(response.json().get("state")) if response.status_code == 200 else str(response.status_code)

        last: dict[str, Counter[str]] = {"bind": Counter(), "deprovision": Counter()}
        for name, operations in tokens.items():
            for op in ("bind", "deprovision"):
                last[op][polled(name, op, operations[op])] += 1
        won_states = {name: polled(name, op, operation) for name, (op, operation) in winners.items()}
        won: dict[str, Counter[str]] = {"bind": Counter(), "deprovision": Counter()}
        for name, (op, _) in winners.items():
            won[op][won_states[name]] += 1
    snap = invariants.snapshot(bench.api, namespace)
    stuck = sorted(i["metadata"]["name"] for i in snap.instances if i["metadata"].get("deletionTimestamp"))
    unfinished_names = sorted(name for name, state in won_states.items() if state != "succeeded")
    unfinished_examples = [_diagnosis(bench, snap, name) for name in unfinished_names[:2]]
    resources = converge(bench, namespace, expected, timeout=45.0)
    inconsistent = len(tokens) - last["bind"]["failed"] + len(tokens) - last["deprovision"]["succeeded"]
    unfinished = len(unfinished_names)
    return {
        "trials": trials,
        "violations": len(tokens)
        + len(off_osb)
        + len(stuck)
        + inconsistent
        + unfinished
        + (0 if resources["converged"] else resources["violation_count"]),
        "outcomes": dict(outcomes.most_common()),
        "both_accepted": len(tokens),
        "both_refused": trials - len(tokens) - len(winners),
        "answers_off_osb": off_osb,
        "last_operation_after_both_accepted": {op: dict(states) for op, states in last.items()},
        "last_operation_of_the_one_accepted": {op: dict(states) for op, states in won.items()},
        "stuck_deleting_instances": len(stuck),
        "stuck_examples": [
            {"instance": i["metadata"]["name"], "status": _brief(i)}
            for i in snap.instances
            if i["metadata"]["name"] in stuck[:3]
        ],
        "unfinished_examples": unfinished_examples,
        "resource_check": resources,
    }


def _diagnosis(bench: Bench, snap: invariants.Snapshot, name: str) -> dict[str, Any]:
    """What an operation still unfinished after the settle was waiting on: its instance as read (status,
    finalizers, deletion), the bindings naming it, and the controller's last log lines naming it."""
    found = [i for i in snap.instances if i["metadata"]["name"] == name]
    instance = found[0] if found else None
    bindings = [
        {"name": b["metadata"]["name"], "status": _brief(b), "finalizers": b["metadata"].get("finalizers")}
        for b in snap.bindings
        if (b.get("spec") or {}).get("instanceId") == name or b["metadata"]["name"].startswith(name)
    ]
    log = bench.process("controller").log.read_text(errors="replace").splitlines()
    return {
        "instance": name,
        "exists": instance is not None,
        "status": _brief(instance) if instance else None,
        "finalizers": instance["metadata"].get("finalizers") if instance else None,
        "operation": (instance.get("status") or {}).get("lastOperation") if instance else None,
        "bindings": bindings,
        "controller_log": [line[:300] for line in log if name in line][-25:],
    }


def recreate_probe(bench: Bench, namespace: str, *, trials: int, seed: int) -> dict[str, Any]:
    """Deprovision an instance and provision the same id again while the old incarnation's registry Secret is
    still there (held for two seconds by a finalizer, as a busy collector would): does the new incarnation get
    a registry Secret of its own, never the old one's values? Registries are kept in the control plane's
    namespace, named by their instance's uid (issue 29), so the two never share a Secret. ``trials`` ids, one
    after the other."""
    core = client.CoreV1Api(bench.api)
    ids = bench.plan_ids()
    hold = {"metadata": {"finalizers": ["reliability.opbroker.io/hold"]}}
    results = []

    def instance(name: str) -> dict[str, Any] | None:
        found = [i for i in invariants.snapshot(bench.api, namespace).instances if i["metadata"]["name"] == name]
        return found[0] if found else None

    def wait(name: str, done: Callable[[dict[str, Any] | None], bool]) -> dict[str, Any] | None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            current = instance(name)
            if done(current):
                return current
            time.sleep(0.5)
        raise TimeoutError(f"{name} did not get there in 60 s")

    def succeeded(obj: dict[str, Any] | None) -> bool:
        return obj is not None and (obj.get("status") or {}).get("state") == "succeeded"

    def registry_of(uid: str) -> Any:
        name = f"opbroker-instance-registry-{uid}"
        found = core.list_namespaced_secret(DEFAULT_NAMESPACE, field_selector=f"metadata.name={name}").items
        return found[0] if found else None

    with bench.osb(4) as http:
        for index in range(trials):
            name = f"again{seed % 1000:03d}-{index:02d}"
            _send(http, ids, namespace, name, "provision", "A").raise_for_status()
            old = wait(name, succeeded)
            assert old is not None
            old_registry = f"opbroker-instance-registry-{old['metadata']['uid']}"
            core.patch_namespaced_secret(old_registry, DEFAULT_NAMESPACE, hold)
            _send(http, ids, namespace, name, "deprovision", "-").raise_for_status()
            wait(name, lambda obj: obj is None)
            _send(http, ids, namespace, name, "provision", "A").raise_for_status()
            time.sleep(2.0)  # the new incarnation runs while the old Secret is held, being deleted
            early = instance(name)
            core.patch_namespaced_secret(old_registry, DEFAULT_NAMESPACE, {"metadata": {"finalizers": None}})
            new = wait(name, succeeded)
            time.sleep(3.0)  # whatever was going to be deleted is gone; the new registry must remain
            assert new is not None
            found = registry_of(new["metadata"]["uid"])
            owner = (found.metadata.annotations or {}).get("opbroker.io/owner-uid") if found is not None else None
            results.append(
                {
                    "instance": name,
                    "new_uid": new["metadata"]["uid"],
                    "registry_owners": [owner] if owner else None,
                    "old_registry_left": registry_of(old["metadata"]["uid"]) is not None,
                    "state_while_old_secret_held": ((early or {}).get("status") or {}).get("state"),
                }
            )
    missing = [r for r in results if r["registry_owners"] != [r["new_uid"]] or r["old_registry_left"]]
    return {"trials": trials, "without_own_registry": len(missing), "details": results, "violations": len(missing)}
