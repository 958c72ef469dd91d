"""``opbroker controller run``: the controller process."""

from __future__ import annotations

import socket
from typing import Annotated

import typer

from opbroker.api import webhooks
from opbroker.api.conventions import DEFAULT_NAMESPACE, DEFAULT_PLAN_SERVICE_ACCOUNT, NAMESPACE_SERVICE_ACCOUNT
from opbroker.api.shards import MAX_SHARDS, Shards, index_from_hostname
from opbroker.cli.options import KubeconfigOption
from opbroker.controller.core.budgets import NamespaceBudgets
from opbroker.controller.multicluster.core.scheduling import SchedulerName
from opbroker.controller.settings import ControllerSettings

app = typer.Typer(
    help="The controller: reconciles instances and bindings into operator resources.", no_args_is_help=True
)


@app.command()
def run(
    kubeconfig: KubeconfigOption = None,
    namespace: Annotated[
        str, typer.Option(help="Control-plane namespace (catalog, leader lease).")
    ] = DEFAULT_NAMESPACE,
    catalog_namespace: Annotated[
        list[str] | None,
        typer.Option(
            help="A trusted namespace SFServices and SFPlans are read from (repeatable; default: --namespace). "
            "Catalog objects anywhere else are ignored with a Warning event. Give the broker the same list."
        ),
    ] = None,
    registry_namespace: Annotated[
        str | None,
        typer.Option(
            help="Where instances' and bindings' registries (generated passwords, keys) are kept: a namespace "
            "consumers cannot read (default: --namespace)."
        ),
    ] = None,
    workers: Annotated[int, typer.Option(help="Concurrent reconciles.")] = 4,
    namespace_workers: Annotated[
        int,
        typer.Option(
            help="Concurrent reconciles of one namespace; the other namespaces' work is served in turn meanwhile, "
            "so a tenant flooding its namespace holds at most this many workers.",
            min=1,
        ),
    ] = 2,
    namespace_operations: Annotated[
        int,
        typer.Option(
            help="Operations (provision, update, bind) in progress at once in one namespace; a new one past it "
            "waits (Ready=False, NamespaceBudgetExceeded). 0: no budget. The control plane's namespaces are exempt.",
            min=0,
        ),
    ] = NamespaceBudgets.operations,
    namespace_cache_mib: Annotated[
        int,
        typer.Option(
            help="MiB of one namespace's objects the controller keeps in memory; past it they are read from the "
            "API server and the namespace's new operations wait. 0: no budget.",
            min=0,
        ),
    ] = NamespaceBudgets.cached_bytes >> 20,
    error_threshold: Annotated[int, typer.Option(help="Consecutive errors before an operation is failed.")] = 8,
    poll_seconds: Annotated[float, typer.Option(help="Re-check interval for in-progress operations.")] = 10.0,
    poll_max_seconds: Annotated[
        float,
        typer.Option(
            help="Longest re-check interval: while every object an operation's status template reads is watched, its "
            "interval grows with its age (half of it) from --poll-seconds up to this (the watch reports changes)."
        ),
    ] = 300.0,
    resync_seconds: Annotated[
        float,
        typer.Option(
            help="Day two: the safety net for a missed event — every this many seconds, provisioned instances whose "
            "objects moved without an event are checked, bound bindings looked at again (0: never).",
            min=0,
        ),
    ] = 600.0,
    live_status_seconds: Annotated[
        float,
        typer.Option(
            help="Day two: at most one change of an instance's live status (Ready) written per this long.", min=0
        ),
    ] = 10.0,
    leader_election: Annotated[bool, typer.Option(help="Campaign for a Lease (active-passive replicas).")] = True,
    shards: Annotated[
        int,
        typer.Option(
            help="Split the instances and bindings over this many shards, each handled by the replicas of its own "
            "--shard (one Lease per shard). Give the broker the same --shards.",
            min=1,
            max=MAX_SHARDS,
        ),
    ] = 1,
    shard: Annotated[
        int | None, typer.Option(help="This replica's shard, 0 to --shards - 1 (or --shard-from-hostname).", min=0)
    ] = None,
    shard_from_hostname: Annotated[
        bool,
        typer.Option(
            help="Take the shard from the hostname's StatefulSet ordinal (<name>-<n>): n modulo --shards, so "
            "--shards * r pods give every shard r replicas."
        ),
    ] = False,
    shard_takeover: Annotated[
        bool,
        typer.Option(
            help="A standby campaigns for every shard's Lease, its own first, and runs as the shard whose Lease it "
            "takes: spare pods cover any shard whose own replicas are gone (with --shards > 1)."
        ),
    ] = False,
    metrics_port: Annotated[
        int | None, typer.Option(help="Serve Prometheus metrics and /healthz, /readyz on this port.")
    ] = None,
    api_wait_seconds: Annotated[
        float,
        typer.Option(
            help="How long to wait for the API server to serve the watched resources before exiting non-zero.",
            min=0,
        ),
    ] = 120.0,
    lease_seconds: Annotated[
        int, typer.Option(help="Leader lease duration in seconds (the longest failover).", min=3)
    ] = 15,
    shutdown_seconds: Annotated[
        float,
        typer.Option(
            help="On SIGTERM/SIGINT: seconds the running reconciles may take to end before the process exits "
            "(under leader election at most half the renew deadline).",
            min=0,
        ),
    ] = 5.0,
    request_timeout: Annotated[
        float,
        typer.Option(help="Seconds an API request may wait for each read of its answer (connecting: 10 s).", min=0.5),
    ] = 60.0,
    watch_seconds: Annotated[
        int,
        typer.Option(
            help="Server-side duration of the controller's watches; one silent for a quarter longer is restarted.",
            min=1,
        ),
    ] = 60,
    stuck_seconds: Annotated[
        float,
        typer.Option(
            help="Liveness fails when a reconcile runs this long, work waits while no reconcile moves this long, "
            "or the API server answers nothing this long.",
            min=1,
        ),
    ] = 120.0,
    multicluster: Annotated[
        bool,
        typer.Option(
            help="Master of several clusters: schedule onto SFClusters, hand instances to sister clusters "
            "(or OPBROKER_CONTROLLER_MULTICLUSTER=true: what `opbroker dev` passes on to its controller).",
            envvar="OPBROKER_CONTROLLER_MULTICLUSTER",
        ),
    ] = False,
    scheduler: Annotated[
        SchedulerName,
        typer.Option(
            help="Which scheduler places instances (with --multicluster; or OPBROKER_CONTROLLER_SCHEDULER).",
            envvar="OPBROKER_CONTROLLER_SCHEDULER",
        ),
    ] = SchedulerName.DEFAULT,
    cluster_probe_seconds: Annotated[
        float, typer.Option(help="How often each SFCluster is probed and its status refreshed.", min=0.2)
    ] = 10.0,
    max_operation_seconds: Annotated[
        float,
        typer.Option(
            help="Fail a provision, update or bind still in progress this many seconds after it was requested "
            "(0: no limit).",
            min=0,
        ),
    ] = 7200.0,
    webhook_port: Annotated[
        int | None,
        typer.Option(help="Serve the admission webhook refusing to delete an Instance with Bindings (HTTPS).", min=0),
    ] = None,
    webhook_url: Annotated[
        str | None,
        typer.Option(help="Where the API server reaches the webhook (default https://127.0.0.1:<webhook-port>)."),
    ] = None,
    webhook_service: Annotated[
        str | None,
        typer.Option(
            help="In-cluster: the Service (in --namespace, port 443) the API server reaches the webhook through; "
            "the ValidatingWebhookConfiguration exists (the ControlPlane creates it), only its caBundle is set."
        ),
    ] = None,
    webhook_configuration: Annotated[
        str, typer.Option(help="Name of the webhook's ValidatingWebhookConfiguration.")
    ] = webhooks.CONFIGURATION,
    webhook_secret: Annotated[
        str, typer.Option(help="Secret (in --namespace) with the webhook's CA and certificate, shared by replicas.")
    ] = webhooks.SECRET,
    sla_order: Annotated[
        str | None, typer.Option(help="Claims: SLA names best first, comma-separated (default L1,L2,L3).")
    ] = None,
    catalog_environment: Annotated[
        list[str] | None, typer.Option(help="Claims: an environment that always gets a ServiceCatalog (repeatable).")
    ] = None,
    single_tenant: Annotated[
        bool,
        typer.Option(
            help="Act with the controller's own rights instead of impersonating each plan's ServiceAccount and each "
            "namespace's opbroker account: only for a cluster with one tenant."
        ),
    ] = False,
    plan_service_account: Annotated[
        str, typer.Option(help="The account (in the plan's namespace) a plan naming none acts as.")
    ] = DEFAULT_PLAN_SERVICE_ACCOUNT,
    namespace_service_account: Annotated[
        str, typer.Option(help="The account, in a consumer's namespace, opbroker writes there as for no plan.")
    ] = NAMESPACE_SERVICE_ACCOUNT,
    template_allow_network: Annotated[
        list[str] | None,
        typer.Option(
            help="A network (CIDR) url templates may be fetched from although it is not public: loopback, "
            "link-local, private (repeatable; default: public addresses only)."
        ),
    ] = None,
    template_proxy: Annotated[
        str | None,
        typer.Option(help="The http(s) proxy url templates are fetched through (the *_PROXY variables are ignored)."),
    ] = None,
    onboard_namespace_selector: Annotated[
        str | None,
        typer.Option(
            help="Onboard every namespace whose labels match this selector (now or when labelled later), acting as "
            "the opbroker-onboarder account of --namespace; offboard one that stops matching."
        ),
    ] = None,
    policy: Annotated[
        list[str] | None,
        typer.Option(
            help="Override one timing policy of the controller's table: NAME=BASE[:CAP[:GIVE_UP[:JITTER]]] "
            "(seconds; repeatable; names and defaults: opbroker.controller.runtime.policies)."
        ),
    ] = None,
) -> None:
    """Run the controller until interrupted."""
    if scheduler is not SchedulerName.DEFAULT and not multicluster:
        raise typer.BadParameter(f"the {scheduler.value} scheduler needs --multicluster", param_hint="--scheduler")
    from opbroker.controller.claims.settings import ClaimsSettings
    from opbroker.controller.running import run as run_controller
    from opbroker.rendering.urlpolicy import FetchPolicy

    if onboard_namespace_selector is not None:
        from opbroker.api import selectors

        try:
            selectors.parse(onboard_namespace_selector)
        except selectors.SelectorError as exc:
            raise typer.BadParameter(str(exc), param_hint="--onboard-namespace-selector") from None
    try:
        template_fetch = FetchPolicy.from_flags(template_allow_network or (), template_proxy)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--template-allow-network / --template-proxy") from None

    from opbroker.controller.runtime.policies import Policies

    policies = Policies()
    for spec in policy or ():
        try:
            policies = policies.overridden(spec)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--policy") from None

    place = _shards(shards, shard, from_hostname=shard_from_hostname)
    budgets = NamespaceBudgets(operations=namespace_operations, cached_bytes=namespace_cache_mib << 20)
    claims = ClaimsSettings.from_flags(sla_order=sla_order, environments=catalog_environment)
    try:
        settings = ControllerSettings(
            namespace=namespace,
            shards=place,
            shard_takeover=shard_takeover,
            catalog_namespaces=tuple(catalog_namespace or ()),
            registry_namespace=registry_namespace,
            workers=workers,
            namespace_workers=namespace_workers,
            budgets=budgets,
            error_threshold=error_threshold,
            status_poll_seconds=poll_seconds,
            status_poll_max_seconds=poll_max_seconds,
            resync_seconds=resync_seconds,
            live_status_seconds=live_status_seconds,
            leader_election=leader_election,
            metrics_port=metrics_port,
            api_wait_seconds=api_wait_seconds,
            lease_seconds=lease_seconds,
            shutdown_seconds=shutdown_seconds,
            request_timeout_seconds=request_timeout,
            watch_seconds=watch_seconds,
            stuck_seconds=stuck_seconds,
            multicluster=multicluster,
            scheduler=scheduler.value,
            cluster_probe_seconds=cluster_probe_seconds,
            max_operation_seconds=max_operation_seconds,
            webhook_port=webhook_port,
            webhook_url=webhook_url,
            webhook_service=webhook_service,
            webhook_configuration=webhook_configuration,
            webhook_secret=webhook_secret,
            claims=claims,
            impersonate=not single_tenant,
            default_plan_service_account=plan_service_account,
            namespace_service_account=namespace_service_account,
            template_fetch=template_fetch,
            onboard_namespace_selector=onboard_namespace_selector,
            policies=policies,
        )
    except ValueError as exc:  # a combination the settings refuse (a sharded multi-cluster master, a lone takeover)
        raise typer.BadParameter(str(exc), param_hint="--shards") from None
    run_controller(settings, kubeconfig=kubeconfig)


def _shards(count: int, index: int | None, *, from_hostname: bool) -> Shards:
    """This replica's place among ``count`` shards, from ``--shard`` or its hostname's ordinal."""
    if from_hostname and index is not None:
        raise typer.BadParameter("give --shard or --shard-from-hostname, not both", param_hint="--shard")
    try:
        if from_hostname:
            index = index_from_hostname(socket.gethostname(), count)
        return Shards(count, index or 0)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--shard") from None
