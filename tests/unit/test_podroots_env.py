"""The kube tier's pod-root controller resolves the downward API as a kubelet does."""

from __future__ import annotations

from mlenv.testing.kube.podroots import Controller


def test_label_and_annotation_paths_resolve_and_a_missing_key_is_empty() -> None:
    pod = {
        "metadata": {
            "name": "ml-dev-env-1",
            "namespace": "ns1",
            "labels": {"apps.kubernetes.io/pod-index": "1"},
            "annotations": {"note": "n"},
        },
        "spec": {"nodeName": "node-a"},
    }

    def field(name: str, path: str) -> dict[str, object]:
        return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}

    container = {
        "env": [
            field("MLENV_POD_INDEX", "metadata.labels['apps.kubernetes.io/pod-index']"),
            field("NOTE", "metadata.annotations['note']"),
            field("ABSENT", "metadata.labels['not-there']"),
            field("NODE", "spec.nodeName"),
        ]
    }
    # _env reads nothing of the controller's own state
    env = {
        e["name"]: e["value"]
        for e in Controller._env(Controller.__new__(Controller), pod, container)
    }
    assert env["MLENV_POD_INDEX"] == "1" and env["NOTE"] == "n" and env["NODE"] == "node-a"
    assert env["ABSENT"] == ""
