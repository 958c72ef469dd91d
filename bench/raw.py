"""The floor nothing can beat: how fast the same API server accepts writes from a tight concurrent client.

ConfigMap creates (small bodies, no controllers watching them) over keep-alive HTTP connections from a
thread pool, straight to the API, with no client library in between.
"""

from __future__ import annotations

import base64
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import yaml

from bench.common import BENCH_AGENT


def raw_write_rate(kubeconfig: Path, namespace: str, *, writes: int = 3000, concurrency: int = 16) -> dict[str, float]:
    config = yaml.safe_load(kubeconfig.read_text())
    cluster = config["clusters"][0]["cluster"]
    token = config["users"][0]["user"]["token"]
    with tempfile.NamedTemporaryFile("wb", suffix=".crt", delete=False) as ca:
        ca.write(base64.b64decode(cluster["certificate-authority-data"]))
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    headers = {"Authorization": f"Bearer {token}", "User-Agent": BENCH_AGENT}
    url = f"{cluster['server']}/api/v1/namespaces/{namespace}/configmaps"
    with httpx.Client(verify=ca.name, headers=headers, limits=limits, timeout=60) as http:

        def create(index: int) -> int:
            body = {"metadata": {"name": f"raw-{index}"}, "data": {"k": "v"}}
            return http.post(url, json=body).status_code

        with ThreadPoolExecutor(concurrency) as pool:
            list(pool.map(create, range(min(200, writes))))  # warm the connections
            started = time.perf_counter()
            codes = list(pool.map(create, range(200, 200 + writes)))
            elapsed = time.perf_counter() - started
    Path(ca.name).unlink()
    failures = sum(1 for code in codes if code != 201)
    if failures:
        raise RuntimeError(f"{failures} of {writes} raw writes failed")
    return {
        "writes": writes,
        "concurrency": concurrency,
        "seconds": round(elapsed, 3),
        "writes_per_second": round(writes / elapsed, 1),
    }
