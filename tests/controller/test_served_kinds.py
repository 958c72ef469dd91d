"""Which kinds are served, known without the shared discovery cache (issue 42): a tenant's made-up kinds cost at
most one read per group version per window and never refresh the official discovery."""

from __future__ import annotations

from opbroker.controller.runtime.served import MAX_GROUP_VERSIONS, WINDOW_SECONDS, ServedKinds, ServedResource

CORE = {"resources": [{"name": "configmaps", "kind": "ConfigMap"}, {"name": "pods/log", "kind": "Pod"}]}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def index(documents: dict[str, object]) -> tuple[ServedKinds, list[str], Clock]:
    reads: list[str] = []
    clock = Clock()

    def fetch(path: str) -> object | None:
        reads.append(path)
        return documents.get(path)

    return ServedKinds(fetch, clock=clock), reads, clock


def test_a_served_kind_is_read_once_and_made_up_kinds_cost_one_read_per_window() -> None:
    served, reads, clock = index({"/api/v1": CORE})
    assert served.served("v1", "ConfigMap") and served.served("v1", "ConfigMap")
    assert not served.served("v1", "Pod")  # only a subresource of that kind is listed
    for number in range(200):
        assert not served.served("v1", f"MadeUp{number}")
        assert not served.served(f"made-up-{number}.example/v1", "Thing")
    assert reads.count("/api/v1") == 1
    assert len(reads) == 1 + 200  # each unserved group version once
    clock.now += WINDOW_SECONDS
    assert not served.served("v1", "MadeUp0")
    assert reads.count("/api/v1") == 2  # a CRD installed since would be found now


def test_a_served_kind_answers_its_plural_group_and_scope_from_the_same_read() -> None:
    """Every request of a reconcile finds its path here (not in the official discovery, whose search is slow and
    not thread-safe): plural, group and scope come from the group version's document, read once."""
    apps = {"resources": [{"name": "deployments", "kind": "Deployment", "namespaced": True}]}
    core = {"resources": [*CORE["resources"], {"name": "namespaces", "kind": "Namespace", "namespaced": False}]}
    served, reads, _ = index({"/api/v1": core, "/apis/apps/v1": apps})
    assert served.resource("apps/v1", "Deployment") == ServedResource("apps", "deployments", "Deployment", True)
    assert served.resource("v1", "Namespace") == ServedResource("", "namespaces", "Namespace", False)
    assert served.resource("v1", "ConfigMap") == ServedResource("", "configmaps", "ConfigMap", False)
    assert served.resource("v1", "Pod") is None and served.resource("apps/v1", "StatefulSet") is None
    for _ in range(100):
        served.resource("apps/v1", "Deployment")
    assert sorted(reads) == ["/api/v1", "/apis/apps/v1"]


def test_a_kind_installed_later_is_found_after_the_window() -> None:
    documents: dict[str, object] = {}
    served, _, clock = index(documents)
    assert not served.served("example.com/v1", "Database")
    documents["/apis/example.com/v1"] = {"resources": [{"name": "databases", "kind": "Database"}]}
    assert not served.served("example.com/v1", "Database")
    clock.now += WINDOW_SECONDS
    assert served.served("example.com/v1", "Database")


def test_malformed_api_versions_are_not_served_and_documents_are_bounded() -> None:
    served, reads, _ = index({})
    for api_version in ("", "a/b/c", "../../x/v1", "../v1", "x/../v1", "V1", "a?b/v1"):
        assert not served.served(api_version, "Kind")
    assert not served.served("v1", "Config/Map") and not served.served("v1", "")
    assert reads == []
    for number in range(MAX_GROUP_VERSIONS + 10):
        served.served(f"g{number}.example/v1", "Kind")
    assert len(served._documents) == MAX_GROUP_VERSIONS
