"""The controller's admission webhook: one replica's server, and the ValidatingWebhookConfiguration it serves.

Every replica, leader or standby, serves it (the webhook Service selects them all):

* the CA and serving certificate are one pair for all replicas, kept in a Secret in the control-plane
  namespace (``webhookcerts``), so the one registered ``caBundle`` verifies whichever replica answers;
* answers come from an index of Bindings a list-and-watch keeps (``bindingrefs``, ``bindingwatch``): one
  lookup per review, no listing; until the first listing is in, the webhook answers 503 and the API server
  applies ``failurePolicy`` (the finalizer still holds such a deletion);
* the HTTPS server (``reviewserver``) handshakes and reads each connection in a task of its own, with
  deadlines and bounded heads and bodies, so no client can hold up the reviews of others;
* every ``webhook_refresh`` of the policy table each replica re-reads the Secret (serving a renewed certificate to new
  connections) and makes sure the configuration carries the CA: :meth:`Webhook.refresh_forever`, an asyncio task
  of its owner's (``handlers.ServiceCatalog.serve_webhook``), each refresh in a pool thread (issue 45's one
  concurrency rule: timers are tasks on a loop, blocking calls go through ``asyncio.to_thread``).

Registration: in-cluster, the ControlPlane component creates the configuration (pointing at the Service) and
grants the controller ``get`` and ``patch`` on that one configuration by name; the controller only fills in
the ``caBundle`` (:func:`register_ca`). Reached by URL (``opbroker dev``, the tests) the controller applies the
whole configuration itself (:func:`register`), which needs rights the in-cluster controller does not have.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import ssl
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from opbroker.api import webhooks
from opbroker.controller.core.views import Meta
from opbroker.controller.runtime.clock import SYSTEM, Clock
from opbroker.controller.runtime.policies import DEFAULTS, Policies
from opbroker.controller.servicecatalog import webhookcerts
from opbroker.controller.servicecatalog.bindingrefs import BindingRefs
from opbroker.controller.servicecatalog.bindingwatch import BindingWatch
from opbroker.controller.servicecatalog.core import admission
from opbroker.controller.servicecatalog.core.views import ReviewRequest
from opbroker.controller.servicecatalog.reviewserver import Limits, ReviewServer
from opbroker.kubeclient.lean import APPLY_PATCH, LeanApi, object_path
from opbroker.kubeclient.wire import JsonBody, mapping_of, objects_of, path_of, text_of

logger = logging.getLogger(__name__)

FIELD_MANAGER = "opbroker-webhook"
#: Where the ValidatingWebhookConfigurations are.
CONFIGURATIONS = "/apis/admissionregistration.k8s.io/v1"
#: (connect, read) deadline of each call on the configuration.
API_TIMEOUT = (5.0, 10.0)


def service_hosts(namespace: str, service: str) -> list[str]:
    """The names a Service is reached by in-cluster (the API server uses ``<service>.<namespace>.svc``)."""
    return [f"{service}.{namespace}.svc", f"{service}.{namespace}.svc.cluster.local", f"{service}.{namespace}"]


def answer(refs: BindingRefs, body: bytes) -> tuple[int, bytes]:
    """The HTTP status and body for an AdmissionReview ``body``, from ``refs`` (never a listing); no I/O."""
    if not refs.synced:
        return 503, json.dumps({"error": "the Bindings are not listed yet"}).encode()
    try:
        request = ReviewRequest.of(json.loads(body)["request"])
        instance = request.instance
        found = refs.referring_to(instance.meta.namespace, instance.meta.name)
        review = admission.review(request, admission.bindings_of(instance, found))
    except (ValueError, KeyError, TypeError, AttributeError):
        return 400, json.dumps({"error": "not an admission.k8s.io/v1 AdmissionReview"}).encode()
    return 200, json.dumps(review).encode()


class Webhook:
    """One replica's webhook: shared certificate, Bindings index and watch, HTTPS server, refresh."""

    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        port: int,
        hosts: Sequence[str],
        namespace: str,
        secret: str = webhooks.SECRET,
        register: Callable[[bytes], None] | None = None,
        limits: Limits | None = None,
        policies: Policies = DEFAULTS,
        clock: Clock = SYSTEM,
    ) -> None:
        """``register(ca)``: make the configuration carry ``ca`` (called at start and when a refresh finds it
        does not); None registers nothing. ``policies``: the timing table (its ``webhook_refresh`` and
        ``webhook_register``). ``clock``: what the certificate's validity and the refreshes' pauses are measured
        on (the real one by default). Reads (or creates) the shared certificate: raises if it cannot."""
        self.hosts = list(hosts)
        self._clock = clock
        """The certificate's validity and the refreshes' pauses are measured on it."""
        self.certificate = webhookcerts.SharedCertificate(api_client, namespace, secret, policies=policies, clock=clock)
        self.bundle = self.certificate.ensure(self.hosts)
        self.refs = BindingRefs()
        self._watch = BindingWatch(api_client, self.refs)
        self._register = register
        self._policies = policies
        self._dir = tempfile.TemporaryDirectory(prefix="opbroker-webhook-")
        self.server = ReviewServer(port, self._context(self.bundle), webhooks.PATH, self.answer, limits=limits)
        self._registered = False

    @property
    def ca(self) -> bytes:
        return self.bundle.ca_cert

    @property
    def port(self) -> int:
        return self.server.port

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Watch, serve on ``loop`` (the controller's), register (blocking: call it in a thread, as the owner does);
        a registration that fails is logged and retried by :meth:`refresh_forever` (the server serves meanwhile)."""
        self._watch.start(loop)
        self.server.start(loop)
        self._registered = self._try(self._registration)

    async def refresh_forever(self) -> None:
        """Refresh after each ``webhook_refresh`` of the policy table — after each ``webhook_register`` while the
        last registration failed — until cancelled; the owner runs it as a task after :meth:`start`, and cancels it
        before :meth:`stop`. Each refresh blocks (API calls): it runs in a pool thread."""
        while True:
            await self._clock.sleep(self._next_look())
            self._registered = await asyncio.to_thread(self._try, self.refresh)

    def stop(self) -> None:
        self._watch.stop()
        self.server.stop()
        self._dir.cleanup()

    def answer(self, body: bytes) -> tuple[int, bytes]:
        return answer(self.refs, body)

    def refresh(self) -> None:
        """Serve the stored certificate (renewed if due) to new connections; re-register the CA if needed."""
        bundle = self.certificate.ensure(self.hosts)
        if bundle != self.bundle:
            self.server.context = self._context(bundle)
            self.bundle = bundle
            logger.info("the webhook serves a renewed certificate")
        self._registration()

    def _registration(self) -> None:
        if self._register is not None:
            self._register(self.ca)

    def _next_look(self) -> float:
        """The wait before the next refresh, or the next registration while the last one failed (jittered)."""
        policies = self._policies
        return policies.delay(policies.webhook_refresh if self._registered else policies.webhook_register)

    @staticmethod
    def _try(step: Callable[[], None]) -> bool:
        """Run ``step``; log a failure by its status or type only (an API refusal may echo a key)."""
        try:
            step()
        except ApiException as exc:
            logger.warning("the webhook's certificate or registration could not be refreshed (HTTP %s)", exc.status)
        except LookupError as exc:  # our own: the configuration is not there (yet)
            logger.warning("the webhook could not be registered: %s", exc)
        except Exception as exc:
            logger.warning("the webhook's certificate or registration could not be refreshed (%s)", type(exc).__name__)
        else:
            return True
        return False

    def _context(self, bundle: webhookcerts.Bundle) -> ssl.SSLContext:
        """A TLS context serving ``bundle`` (the key goes through a private temporary file: ``ssl`` loads
        no key from memory)."""
        stamp = self._clock.now().strftime("%Y%m%d%H%M%S%f")
        cert_file, key_file = Path(self._dir.name, f"{stamp}.crt"), Path(self._dir.name, f"{stamp}.key")
        key_file.touch(mode=0o600)
        key_file.write_bytes(bundle.key)
        cert_file.write_bytes(bundle.cert)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(cert_file, key_file)
        key_file.unlink()
        cert_file.unlink()
        return context


def _configuration_path(name: str) -> str:
    return object_path(CONFIGURATIONS, "validatingwebhookconfigurations", None, name)


def registered_ca(api_client: client.ApiClient, name: str) -> bytes | None:
    """The caBundle configuration ``name`` carries (b"" without one); None when it does not exist."""
    api = LeanApi(api_client)
    try:
        found = mapping_of(api.request("GET", _configuration_path(name), timeout=API_TIMEOUT))
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    finally:
        api.close()
    for hook in objects_of(found.get("webhooks")):
        if hook.get("name") == webhooks.WEBHOOK_NAME:
            return base64.b64decode(text_of(path_of(hook, "clientConfig", "caBundle")) or "")
    return b""


def register(api_client: client.ApiClient, manifest: JsonBody) -> None:
    """Create or update the whole configuration by server-side apply (URL mode: needs create rights)."""
    api = LeanApi(api_client)
    try:
        api.request(
            "PATCH",
            _configuration_path(Meta.of(manifest.get("metadata")).name),
            query=(("fieldManager", FIELD_MANAGER), ("force", True)),
            body=manifest,
            content_type=APPLY_PATCH,
            timeout=API_TIMEOUT,
        )
    finally:
        api.close()


def register_ca(api_client: client.ApiClient, name: str, ca: bytes) -> None:
    """Put ``ca`` into the existing configuration ``name`` (in-cluster: the ControlPlane created it), unless it
    is there already. A server-side apply of the ``caBundle`` field alone: the fields the ControlPlane set stay
    its own, so neither ``pulumi up`` nor the controller undoes the other's."""
    current = registered_ca(api_client, name)
    if current is None:
        raise LookupError(f"the ValidatingWebhookConfiguration {name!r} does not exist (the ControlPlane creates it)")
    if current == ca:
        return
    patch: JsonBody = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [{"name": webhooks.WEBHOOK_NAME, "clientConfig": {"caBundle": base64.b64encode(ca).decode()}}],
    }
    register(api_client, patch)
    logger.info("registered the webhook's CA in ValidatingWebhookConfiguration %s", name)


def register_url(api_client: client.ApiClient, url: str, name: str = webhooks.CONFIGURATION) -> Callable[[bytes], None]:
    """URL mode's ``register``: the whole configuration, applied each time (the URL may have changed too)."""

    def apply(ca: bytes) -> None:
        register(api_client, webhooks.configuration(ca, url=url, name=name))

    return apply
