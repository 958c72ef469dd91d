"""The controller's side of the admin API: execute the preview and rollout requests the broker writes.

The broker records each request in a ConfigMap of the control-plane namespace (:mod:`opbroker.api.adminrequests`);
this module finds the unanswered ones and executes them with the code behind ``opbroker plan diff`` and
``opbroker plan update-instances`` (:mod:`opbroker.controller.catalog.rollouts`), writing the answer into the same
ConfigMap. It runs on the leader only (started with the controller), so one process executes each request.

A preview is answered at once (one page of instances). A rollout runs on a thread of its own, paced; its answer
is rewritten after every page, and the request is re-read (at most once a second) before each instance is
marked, so a cancel takes effect within about a second. A rollout found ``Running`` at start-up (the previous
leader stopped mid-way) is resumed with ``onlyOutdated`` (instances the rollout already re-rendered are
skipped; ones it marked that are still busy are skipped as busy), and its answer says so.
"""

from __future__ import annotations

import logging
import threading
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
from opbroker.kubeclient.wire import JsonBody, JsonObject
from opbroker.rendering import Renderer

log = logging.getLogger("opbroker.controller.admin")


def _ref(namespace: str, name: str) -> ResourceRef:
    return ResourceRef(api_version="v1", kind="ConfigMap", name=name, namespace=namespace)


class AdminRequests:
    """Finds and executes admin requests in ``namespace``; :meth:`run_once` is one pass (the tests call it)."""

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
        self._running: dict[str, threading.Thread] = {}
        self._lock = threading.Lock()

    # -- the loop ---------------------------------------------------------------------------------------

    def serve(self, stop: threading.Event) -> None:
        while not stop.wait(self._policies.delay(self._policies.admin_poll)):
            try:
                self.run_once()
            except Exception as exc:  # a failed pass is retried at the next; the reason is logged, not the body
                log.warning("admin requests: %s: %s", type(exc).__name__, exc)

    def start(self) -> threading.Event:
        stop = threading.Event()
        threading.Thread(target=self.serve, args=(stop,), name="admin-requests", daemon=True).start()
        return stop

    def run_once(self, *, background: bool = True) -> None:
        """Answer every pending preview; start every rollout not finished and not running here."""
        for body in self.kube.list_objects("v1", "ConfigMap", self.namespace):
            kind = wire.kind_of(body)
            if kind is wire.Kind.PREVIEW:
                self._preview(AdminRequestView.of(body))
            elif kind is wire.Kind.ROLLOUT:
                self._rollout(AdminRequestView.of(body), background=background)

    def wait(self, timeout: float) -> None:
        """Join the rollout threads (tests)."""
        for thread in list(self._running.values()):
            thread.join(timeout)

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

    def _rollout(self, obj: AdminRequestView, *, background: bool) -> None:
        name = obj.meta.name
        with self._lock:
            if name in self._running and self._running[name].is_alive():
                return
        try:
            answer = wire.rollout_answer(obj.body)
            request = wire.rollout_request(obj.body)
        except wire.Unreadable as exc:
            self._answer(obj, wire.RolloutAnswer(phase=wire.Phase.FAILED, message=str(exc), updated_at=self._now()))
            return
        if request is None or (answer is not None and answer.phase.finished):
            return
        resumed = answer is not None and answer.phase is wire.Phase.RUNNING
        if background:
            thread = threading.Thread(target=self.roll_out, args=(obj, request, resumed), name=f"rollout {name}")
            thread.daemon = True
            with self._lock:
                self._running[name] = thread
            thread.start()
        else:
            self.roll_out(obj, request, resumed)

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
