"""kmock's Kubernetes API emulator on 127.0.0.1, for tests/test_kubernetes_backend.py.

kmock (``kmock.KubernetesEmulator``, PyPI) keeps the objects it is sent in memory and serves them
back: create, get, list, patch (a merge of the sent JSON, ``/status`` included), delete, discovery of
the resources it is told of. It runs no controller and accepts objects of kinds that no CRD defines,
so the tests register the JobSet resource themselves (``register_jobset``) and play the controllers:
the JobSet controller and the kubelet (``jobset_status``, ``add_pod``, ``pod_status``), Kueue
(``suspend``), the log endpoint (``serve_log``).

The server runs in its own thread and event loop; the test talks to it over HTTP, as llmb does.
"""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.error
import urllib.request
from pathlib import Path

import kmock

JOBSETS = "/apis/jobset.x-k8s.io/v1alpha2"
TOKEN = "kube-token-3c5e7a9b1d"  # the kubeconfig's bearer token: must appear in no file llmb writes


class KubeEmulator:
    def __init__(self, jobset: bool = True, kueue: bool = False):
        self.jobset, self.kueue = jobset, kueue
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.k: kmock.KubernetesEmulator | None = None
        self.url = ""

    # ------------------------------------------------------------ lifecycle

    def __enter__(self) -> KubeEmulator:
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("kmock did not start")
        self.k.resources["v1/pods"] = kmock.ResourceInfo(
            kind="Pod", namespaced=True, verbs={"get", "list", "create", "patch", "delete"}
        )
        if self.jobset:
            self.register_jobset()
        if self.kueue:
            self.k.resources["kueue.x-k8s.io/v1beta1/localqueues"] = kmock.ResourceInfo(
                kind="LocalQueue", namespaced=True, verbs={"get", "list"}
            )
        return self

    def __exit__(self, *exc) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    def _serve(self) -> None:
        async def main():
            async with kmock.KubernetesEmulator() as k, kmock.Server(k) as server:
                self.k, self.url = k, str(server.url).rstrip("/")
                self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
                self._ready.set()
                await self._stop.wait()

        asyncio.run(main())

    def register_jobset(self) -> None:
        """What installing JobSet's CRD does for discovery: the API serves ``jobsets``."""
        self.k.resources["jobset.x-k8s.io/v1alpha2/jobsets"] = kmock.ResourceInfo(
            kind="JobSet",
            namespaced=True,
            singular="jobset",
            verbs={"get", "list", "create", "patch", "delete", "watch"},
            subresources={"status"},
        )

    # ------------------------------------------------------------ HTTP, as a controller would

    def call(self, method: str, path: str, body=None, content_type="application/json"):
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.url + path, data=data, method=method, headers={"Content-Type": content_type}
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                raw = answer.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()
        return 200, raw

    def requests(self, method: str | None = None, contains: str = "") -> list:
        return [
            r
            for r in list(self.k)
            if (method is None or str(r.method.value).upper() == method) and contains in r.url.path
        ]

    def jobsets(self, namespace: str) -> list[dict]:
        code, raw = self.call("GET", f"{JOBSETS}/namespaces/{namespace}/jobsets")
        assert code == 200, raw
        return json.loads(raw)["items"]

    def jobset_status(self, namespace: str, name: str, **status) -> None:
        code, raw = self.call(
            "PATCH",
            f"{JOBSETS}/namespaces/{namespace}/jobsets/{name}/status",
            {"status": status},
            "application/merge-patch+json",
        )
        assert code == 200, raw

    def suspend(self, namespace: str, name: str, suspended: bool) -> None:
        code, raw = self.call(
            "PATCH",
            f"{JOBSETS}/namespaces/{namespace}/jobsets/{name}",
            {"spec": {"suspend": suspended}},
            "application/merge-patch+json",
        )
        assert code == 200, raw

    def add_pods(
        self, namespace: str, jobset: str, count: int, phase: str = "Pending"
    ) -> list[str]:
        """The pods the Job controller makes for the JobSet's one Job: ``<jobset>-node-0-<i>-xxxxx``."""
        names = []
        for index in range(count):
            name = f"{jobset}-node-0-{index}-{'abcde'[index % 5] * 5}"
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": name,
                    "namespace": namespace,
                    "labels": {
                        "jobset.sigs.k8s.io/jobset-name": jobset,
                        "jobset.sigs.k8s.io/replicatedjob-name": "node",
                        "batch.kubernetes.io/job-completion-index": str(index),
                    },
                    "annotations": {"batch.kubernetes.io/job-completion-index": str(index)},
                },
                "spec": {"containers": [{"name": "llmb", "image": "nvcr.io/nvidia/nemo:25.11.01"}]},
                "status": {"phase": phase},
            }
            code, raw = self.call("POST", f"/api/v1/namespaces/{namespace}/pods", pod)
            assert code == 200, raw
            names.append(name)
        return names

    def pod_status(self, namespace: str, name: str, status: dict, node: str | None = None) -> None:
        body: dict = {"status": status}
        if node:
            body["spec"] = {"nodeName": node}
        code, raw = self.call(
            "PATCH",
            f"/api/v1/namespaces/{namespace}/pods/{name}/status",
            body,
            "application/merge-patch+json",
        )
        assert code == 200, raw

    def serve_log(self, namespace: str, pod: str, logs) -> None:
        """The pod's container log: each GET answers the next of ``logs`` (the last one again after)."""
        pending = list(logs)

        def answer():
            return pending.pop(0) if len(pending) > 1 else pending[0]

        self.k[f"get /api/v1/namespaces/{namespace}/pods/{pod}/log"] << answer

    def kubeconfig(
        self, path: Path, namespace: str = "llmb-bench", context: str = "emulator"
    ) -> Path:
        path.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "kmock", "cluster": {"server": self.url}}],
                    "users": [{"name": "bench", "user": {"token": TOKEN}}],
                    "contexts": [
                        {
                            "name": context,
                            "context": {
                                "cluster": "kmock",
                                "user": "bench",
                                "namespace": namespace,
                            },
                        },
                        {
                            "name": "other",
                            "context": {
                                "cluster": "kmock",
                                "user": "bench",
                                "namespace": "other-ns",
                            },
                        },
                    ],
                    "current-context": context,
                }
            )
        )
        return path
