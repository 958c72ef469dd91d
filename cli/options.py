"""Options and the Kubernetes door every command that talks to a cluster shares: one spelling of ``--kubeconfig``
and ``--context``, one way to open the cluster they name."""

from __future__ import annotations

from typing import Annotated, Any

import typer

KubeconfigOption = Annotated[
    str | None, typer.Option(help="Kubeconfig of the control plane (default: in-cluster, then ~/.kube/config).")
]
ContextOption = Annotated[str | None, typer.Option(help="The kubeconfig context to use (default: its current one).")]


def kube_for(kubeconfig: str | None, context: str | None = None) -> Any:
    """The controller's Kubernetes door to the cluster ``kubeconfig`` (and ``context``) name; imported late, so
    commands that never reach a cluster start without the client."""
    from opbroker.controller.running import api_client_for
    from opbroker.controller.runtime.kube import Kube

    return Kube(api_client_for(kubeconfig, context=context))
