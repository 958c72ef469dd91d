"""The controller's side of the admin API: execute the preview and rollout requests the broker writes.

The broker records each request in a ConfigMap of the control-plane namespace (:mod:`opbroker.api.adminrequests`);
this module finds the unanswered ones and executes them with the code behind ``opbroker plan diff`` and
``opbroker plan update-instances`` (:mod:`opbroker.controller.catalog.rollouts`), writing the answer into the same
ConfigMap. It runs on the leader only (started with the controller), so one process executes each request.

The requests are looked for every ``admin_poll`` of the policy table by an asyncio task on the controller's loop
(:meth:`AdminRequests.start`; issue 45's one concurrency rule: timers are tasks on the one loop, blocking work goes
through the runtime's one pool with ``asyncio.to_thread``). A preview is answered at once (one page of instances),
its reads in a pool thread. A rollout is a task of its own whose whole run is one pool thread (it paces itself there,
blocking); at most :data:`~opbroker.controller.runtime.runner.ROLLOUTS_AT_ONCE` run at once — the runtime's pool
has a thread for each beyond the reconciles', so a rollout never slows them — and a rollout found beyond that starts
at a later pass. Its answer is rewritten after every page, and the request is re-read (at most once a second)
before each instance is marked, so a cancel takes effect within about a second. A rollout found ``Running`` at
start-up (the previous leader stopped mid-way) is resumed with ``onlyOutdated`` (instances the rollout already
re-rendered are skipped; ones it marked that are still busy are skipped as busy), and its answer says so.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable

from kubernetes.client.exceptions import ApiException

from opbroker.api import adminrequests as wire
from opbroker.api.catalog import SFPlan
from opbroker.api.meta import ResourceRef
from opbroker.controller.catalog import rollouts
from opbroker.controller.catalog.catalog import spec_hash
from opbroker.controller.catalog.core.rollout_views import AdminRequestView, PlanView
from opbroker.controller.kinds import PLANS
from opbroker.controller.runtime.clock import SYSTEM, Clock
from opbroker.controller.runtime.kube import Kube
from opbroker.controller.runtime.policies import DEFAULTS, Policies
from opbroker.controller.runtime.runner import ROLLOUTS_AT_ONCE
from opbroker.kubeclient.wire import JsonBody, JsonObject
from opbroker.rendering import Renderer

log = logging.getLogger("opbroker.controller.admin")


def _ref(namespace: str, name: str) -> ResourceRef:
    return ResourceRef(api_version="v1", kind="ConfigMap", name=name, namespace=namespace)


class AdminRequests:
    """Finds and executes admin requests in ``namespace``; :meth:`pass_once` is one pass, :meth:`start` repeats it."""

    def __init__(
        self,
        kube: Kube,
        *,
        namespace: str,
        registry_namespace: str,
        plan_user: Callable[[JsonObject], str | None],
        renderer: Callable[[], Renderer] = Renderer,
        clock: Clock = SYSTEM,
        policies: Policies = DEFAULTS,
    ) -> None:
        self.kube = kube
        self._policies = policies
        """The timing table: the pause between two looks for new requests is its ``admin_poll``."""
        self._plan_user = plan_user
        """The user a plan acts as (``identities.plan_user``): a preview's live reads act as the current plan's."""
        self.namespace = namespace
        self.registry_namespace = registry_namespace
        self._renderer = renderer
        self._clock = clock
        """The pacing and the cancel checks' durations, the answers' ``updatedAt`` (the real one by default)."""
        self._serving: asyncio.Task[None] | None = None
        """The task looking for requests (:meth:`start`), cancelled by :meth:`stop`."""
        self._running: dict[str, asyncio.Task[None]] = {}
        """The rollouts running here, by request name (at most one each; read and changed on the loop only)."""

    # -- the loop ---------------------------------------------------------------------------------------

    def start(self) -> None:
        """Look for requests every ``admin_poll``, in a task on the running loop (call on it)."""
        self._serving = asyncio.get_running_loop().create_task(self.serve(), name="admin requests")

    def stop(self) -> None:
        """Look for no more requests; cancel the rollouts' tasks. A rollout's pool thread ends with its page as
        before (a stop never waited for it: the next leader resumes it)."""
        for task in (self._serving, *self._running.values()):
            if task is not None:
                task.cancel()

    async def serve(self) -> None:
        """A pass after every ``admin_poll`` (jittered, on the clock) until cancelled."""
        while True:
            await self._clock.sleep(self._policies.delay(self._policies.admin_poll))
            try:
                await self.pass_once()
            except Exception as exc:  # a failed pass is retried at the next; the reason is logged, not the body
                log.warning("admin requests: %s: %s", type(exc).__name__, exc)

    async def pass_once(self) -> None:
        """Answer every pending preview; start every rollout not finished and not running here, as a task (each
        blocking step in the runtime's pool)."""
        listed = await asyncio.to_thread(self.kube.list_objects, "v1", "ConfigMap", self.namespace)
        for body in listed:
            kind = wire.kind_of(body)
            if kind is wire.Kind.PREVIEW:
                await asyncio.to_thread(self._preview, AdminRequestView.of(body))
            elif kind is wire.Kind.ROLLOUT:
                obj = AdminRequestView.of(body)
                name = obj.meta.name
                if name in self._running:
                    continue
                if len(self._running) >= ROLLOUTS_AT_ONCE:
                    log.debug("rollout %s waits: %d rollouts run already", name, len(self._running))
                    continue
                due = await asyncio.to_thread(self._due, obj)
                if due is not None:
                    self._running[name] = task = asyncio.get_running_loop().create_task(
                        self._run_rollout(obj, *due), name=f"rollout {name}"
                    )
                    task.add_done_callback(functools.partial(self._ended, name))

    async def _run_rollout(self, obj: AdminRequestView, request: wire.RolloutRequest, resumed: bool) -> None:
        """One rollout, to its end, in one pool thread (see the module docstring)."""
        await asyncio.to_thread(self.roll_out, obj, request, resumed)

    def _ended(self, name: str, task: asyncio.Task[None]) -> None:
        """A rollout's task ended: its name may run again (a request resumed later); a failure is logged (on a
        thread of its own it was printed by the thread's hook)."""
        if self._running.get(name) is task:
            del self._running[name]
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.warning("rollout %s stopped: %s: %s", name, type(exc).__name__, exc)

    # -- preview ----------------------------------------------------------------------------------------

    def _answer(
        self, obj: AdminRequestView, answer: wire.PreviewAnswer | wire.RolloutAnswer, *, guarded: bool = False
    ) -> None:
        """Write ``answer``; ``guarded``: only onto the version of the request it answers (a preview replaced
        while it was rendered is answered at the next pass, not with the old one's diffs)."""
        text = answer.to_json()
        if len(text.encode()) > wire.MAX_ANSWER_BYTES:  # cannot happen within the limits; never write past them
            text = type(answer)(phase=wire.Phase.FAILED, message="the answer exceeds its size limit").to_json()
        patch: JsonBody = {"data": {wire.ANSWER_KEY: text}}
        if guarded:
            patch["metadata"] = {"resourceVersion": obj.meta.resource_version}
        try:
            self.kube.merge_patch(_ref(self.namespace, obj.meta.name), patch)
        except ApiException as exc:
            if not (guarded and exc.status == 409):
                raise

    def _preview(self, obj: AdminRequestView) -> None:
        try:
            if wire.preview_answer(obj.body) is not None:
                return
            request = wire.preview_request(obj.body)
        except wire.Unreadable as exc:
            self._answer(obj, wire.PreviewAnswer(phase=wire.Phase.FAILED, message=str(exc)), guarded=True)
            return
        if request is None:
            return
        try:
            answer = self.preview(request)
        except Exception as exc:  # answered, not retried every pass: the admin asks again
            log.warning("preview of plan %s failed: %s", request.plan, type(exc).__name__)
            answer = wire.PreviewAnswer(phase=wire.Phase.FAILED, message=_failure(exc))
        self._answer(obj, answer, guarded=True)

    def preview(self, request: wire.PreviewRequest) -> wire.PreviewAnswer:
        """One page of per-instance diffs for ``request``."""
        current = self.kube.get_custom(PLANS, self.namespace, request.plan)
        if current is None:
            return wire.PreviewAnswer(phase=wire.Phase.FAILED, message=f"no SFPlan {request.plan!r}")
        try:
            proposed = SFPlan.model_validate(request.proposed)
        except ValueError as exc:
            return wire.PreviewAnswer(phase=wire.Phase.FAILED, message=f"the proposed plan is invalid: {exc}")
        if proposed.spec.id != PlanView.of(current).osb_id:
            return wire.PreviewAnswer(
                phase=wire.Phase.FAILED, message="the proposed plan's spec.id is not the plan's: a plan keeps its id"
            )
        found: list[wire.InstancePreview] = []
        more = False
        for diff in rollouts.previews(
            self.kube,
            self._renderer(),
            namespace=self.namespace,
            registry_namespace=self.registry_namespace,
            current_body=current,
            proposed=proposed,
            proposed_service=request.proposed_service,
            instance_namespace=request.instance_namespace,
            acting=self._plan_user(current),
            context=request.context,
            after=request.after,
        ):
            if len(found) == request.limit:
                more = True
                break
            found.append(diff.to_wire())
        counted = {change: sum(1 for f in found if f.change == change.value) for change in rollouts.Change}
        return wire.PreviewAnswer(
            phase=wire.Phase.SUCCEEDED,
            instances=found,
            changed=counted[rollouts.Change.CHANGED],
            unchanged=counted[rollouts.Change.UNCHANGED],
            failing=counted[rollouts.Change.FAILING],
            next_after=f"{found[-1].namespace}/{found[-1].name}" if more and found else None,
        )

    # -- rollout ----------------------------------------------------------------------------------------

    def _due(self, obj: AdminRequestView) -> tuple[wire.RolloutRequest, bool] | None:
        """The request to roll out and whether it resumes one found ``Running`` (a previous leader's), or None: no
        request, finished, or unreadable (answered ``Failed`` here)."""
        try:
            answer = wire.rollout_answer(obj.body)
            request = wire.rollout_request(obj.body)
        except wire.Unreadable as exc:
            self._answer(obj, wire.RolloutAnswer(phase=wire.Phase.FAILED, message=str(exc), updated_at=self._now()))
            return None
        if request is None or (answer is not None and answer.phase.finished):
            return None
        return request, answer is not None and answer.phase is wire.Phase.RUNNING

    def _now(self) -> str:
        """An answer's ``updatedAt``: the clock's wall time, to the second."""
        return self._clock.now().isoformat(timespec="seconds")

    def roll_out(self, obj: AdminRequestView, request: wire.RolloutRequest, resumed: bool = False) -> None:
        """Execute ``request`` to its end (or its cancel), its answer rewritten after every page."""
        note = "resumed after a controller restart: instances already re-rendered are skipped" if resumed else None
        if request.cancelled:
            self._answer(obj, wire.RolloutAnswer(phase=wire.Phase.CANCELLED, message=note, updated_at=self._now()))
            return
        found = self.kube.get_custom(PLANS, self.namespace, request.plan)
        if found is None:
            self._answer(
                obj,
                wire.RolloutAnswer(
                    phase=wire.Phase.FAILED, message=f"no SFPlan {request.plan!r}", updated_at=self._now()
                ),
            )
            return
        plan = PlanView.of(found)
        every = self._policies.rollout_cancel_check.base
        cancel = _CancelCheck(
            self.kube, _ref(self.namespace, obj.meta.name), self._clock.monotonic, self._clock.block, every=every
        )

        def answer(report: rollouts.UpdateReport, phase: wire.Phase, message: str | None = note) -> wire.RolloutAnswer:
            return wire.RolloutAnswer(
                phase=phase,
                marked=len(report.marked),
                skipped={reason.value: count for reason, count in report.skipped.items()},
                pages=report.pages,
                recent=[f"{ns}/{n}" for ns, n in report.marked[-wire.RECENT :]],
                message=message,
                updated_at=self._now(),
            )

        self._answer(obj, answer(rollouts.UpdateReport(), wire.Phase.RUNNING))
        try:
            report = rollouts.update_instances(
                self.kube,
                plan_id=plan.plan_id,
                plan_hash=spec_hash(dict(plan.spec)),
                namespace=request.instance_namespace,
                batch_size=request.batch_size,
                pacer=rollouts.Pacer(request.rate, clock=self._clock.monotonic, sleep=cancel.sleep),
                only_outdated=request.only_outdated or resumed,
                should_stop=cancel,
                progress=lambda report: self._answer(obj, answer(report, wire.Phase.RUNNING)),
                policies=self._policies,
                clock=self._clock,
            )
        except Exception as exc:
            log.warning("rollout of plan %s failed: %s", request.plan, type(exc).__name__)
            self._answer(obj, answer(rollouts.UpdateReport(), wire.Phase.FAILED, _failure(exc)))
            return
        self._answer(obj, answer(report, wire.Phase.CANCELLED if report.stopped else wire.Phase.SUCCEEDED))


class _CancelCheck:
    """Whether the rollout's request says ``cancelled`` (or is gone), read at most once ``every`` seconds (the
    policy table's ``rollout_cancel_check``); and the pacer's sleep, cut short by a cancel (a rollout at 0.01 marks
    per second would otherwise notice it 100 s late)."""

    def __init__(
        self,
        kube: Kube,
        ref: ResourceRef,
        clock: Callable[[], float],
        sleep: Callable[[float], None] = SYSTEM.block,
        *,
        every: float = DEFAULTS.rollout_cancel_check.base,
    ) -> None:
        self.kube, self.ref, self.clock, self._sleep, self._every = kube, ref, clock, sleep, every
        self._read_at: float | None = None
        self._cancelled = False

    def __call__(self) -> bool:
        now = self.clock()
        if self._read_at is None or now - self._read_at >= self._every:
            self._read_at = now
            obj = self.kube.get(self.ref, fresh=True)
            try:
                request = wire.rollout_request(obj) if obj is not None else None
            except wire.Unreadable:
                request = None
            self._cancelled = request is None or request.cancelled
        return self._cancelled

    def sleep(self, seconds: float) -> None:
        deadline = self.clock() + seconds
        while not self():
            left = deadline - self.clock()
            if left <= 0:
                return
            self._sleep(min(left, self._every))


def _failure(exc: Exception) -> str | None:
    """What went wrong, for the answer: a Kubernetes error by status and reason only (its body may echo what
    was sent or read)."""
    if isinstance(exc, ApiException):
        return f"Kubernetes API error {exc.status} {exc.reason}"
    return rollouts.short(f"{type(exc).__name__}: {exc}")
