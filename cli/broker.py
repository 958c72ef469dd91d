"""``opbroker broker``: serve the Open Service Broker API (v2.17) for the catalog of a control plane."""

from __future__ import annotations

import gc
import json
import logging
from pathlib import Path
from typing import Annotated

import typer

from opbroker.api.conventions import DEFAULT_NAMESPACE
from opbroker.api.shards import MAX_SHARDS, Shards
from opbroker.cli.console import err, out

app = typer.Typer(help="The OSB broker: serves the catalog's services over OSB API v2.17.", no_args_is_help=True)


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8080,
    kubeconfig: Annotated[
        Path | None, typer.Option(help="Kubeconfig of the control plane (default: in-cluster, then ~/.kube/config).")
    ] = None,
    namespace: Annotated[
        str, typer.Option(help="Control-plane namespace: the catalog (SFService/SFPlan) and the credentials Secret.")
    ] = DEFAULT_NAMESPACE,
    catalog_namespace: Annotated[
        list[str] | None,
        typer.Option(
            help="A trusted namespace the catalog is read from (repeatable; default: --namespace). "
            "Give the controller the same list."
        ),
    ] = None,
    instance_namespace: Annotated[
        str | None,
        typer.Option(help="Namespace for instances whose request context names none (default: --namespace)."),
    ] = None,
    shards: Annotated[
        int,
        typer.Option(
            help="The controller's shard count (its --shards): what the broker creates is labelled with the shard "
            "that handles it.",
            min=1,
            max=MAX_SHARDS,
        ),
    ] = 1,
    context_namespaces: Annotated[
        bool, typer.Option(help="Record instances in the request's context.namespace (Kubernetes profile).")
    ] = True,
    allowed_namespace: Annotated[
        list[str] | None,
        typer.Option(
            help="A namespace a request's context.namespace may name, besides the default instance namespace "
            "(repeatable; or OPBROKER_BROKER_ALLOWED_NAMESPACES, space-separated). Any other is refused with 400 "
            "unless it matches --allowed-namespace-selector.",
            envvar="OPBROKER_BROKER_ALLOWED_NAMESPACES",
        ),
    ] = None,
    allowed_namespace_selector: Annotated[
        str | None,
        typer.Option(
            help="A label selector on Namespaces ('tenant=true', 'team in (a,b)'): a request's context.namespace "
            "may name a namespace whose labels match (or OPBROKER_BROKER_ALLOWED_NAMESPACE_SELECTOR).",
            envvar="OPBROKER_BROKER_ALLOWED_NAMESPACE_SELECTOR",
        ),
    ] = None,
    credentials_secret: Annotated[
        str | None,
        typer.Option(
            help="Secret in --namespace with 'username'/'password' for basic auth "
            "(else OPBROKER_BROKER_USERNAME / OPBROKER_BROKER_PASSWORD)."
        ),
    ] = None,
    admin_credentials_secret: Annotated[
        str | None,
        typer.Option(
            help="Secret in --namespace with 'username'/'password' for the admin API under /admin (else "
            "OPBROKER_ADMIN_USERNAME / OPBROKER_ADMIN_PASSWORD; neither: no admin API). Must differ from the OSB ones."
        ),
    ] = None,
    sync_timeout: Annotated[float, typer.Option(help="Seconds a synchronous plan's request waits.")] = 60.0,
    retry_after: Annotated[int, typer.Option(help="Retry-After seconds sent while operations are pending.")] = 5,
    max_body_bytes: Annotated[
        int, typer.Option(min=1024, help="Refuse request bodies larger than this with 413 (before parsing).")
    ] = 1024 * 1024,
    max_request_head_bytes: Annotated[
        int,
        typer.Option(
            min=4096,
            help="Refuse requests whose request line and headers exceed this (400, connection closed; "
            "default 16 KiB, h11's).",
        ),
    ] = 16 * 1024,
    request_head_timeout: Annotated[
        float,
        typer.Option(min=0.1, help="Close a connection that sends no complete request head within these seconds."),
    ] = 10.0,
    metrics_port: Annotated[
        int | None,
        typer.Option(
            help="Serve /metrics on this port (same --host, no authentication) instead of the OSB port: "
            "one the broker's Service does not expose."
        ),
    ] = None,
    metrics_authentication: Annotated[
        bool,
        typer.Option(help="Without --metrics-port: /metrics on the OSB port needs the broker's credentials."),
    ] = True,
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error.")] = "info",
) -> None:
    """Serve the broker until interrupted (Ctrl-C)."""
    from opbroker.broker.authentication import ConfigurationError
    from opbroker.broker.server import kubernetes_client, server
    from opbroker.broker.settings import Settings

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = Settings.with_environment(
        namespace=namespace,
        catalog_namespaces=tuple(catalog_namespace or ()),
        instance_namespace=instance_namespace,
        shards=Shards(shards),
        context_namespaces=context_namespaces,
        allowed_namespaces=tuple(allowed_namespace or ()),
        allowed_namespace_selector=allowed_namespace_selector,
        credentials_secret=credentials_secret,
        admin_credentials_secret=admin_credentials_secret,
        sync_timeout=sync_timeout,
        retry_after=retry_after,
        max_body_bytes=max_body_bytes,
        max_request_head_bytes=max_request_head_bytes,
        request_head_timeout=request_head_timeout,
        metrics_port=metrics_port,
        metrics_host=host,
        metrics_authentication=metrics_authentication,
    )
    try:
        served = server(settings, kubernetes_client(kubeconfig), host=host, port=port, log_level=log_level.lower())
    except ConfigurationError as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(1) from None
    out.print(f"opbroker broker on http://{host}:{port} (catalog from {', '.join(settings.trusted_namespaces)})")
    if metrics_port is not None:
        out.print(f"metrics on http://{host}:{metrics_port}/metrics")
    # What start-up built (the Kubernetes client's ~100 000 objects of models, FastAPI, pydantic) lives as long as
    # the process: out of the collector's reach, a full collection walks only what requests leave behind (it
    # walked them all, ~0.1 s each time; issue 31).
    gc.collect()
    gc.freeze()
    served.run()


@app.command()
def openapi() -> None:
    """Print the broker's OpenAPI document (JSON), without connecting to a cluster."""
    from kubernetes import client

    from opbroker.broker.app import create_app
    from opbroker.broker.settings import Settings

    settings = Settings(username="-", password="-", namespace_index=False)
    out.print(json.dumps(create_app(settings, client.ApiClient()).openapi(), indent=2), markup=False)
