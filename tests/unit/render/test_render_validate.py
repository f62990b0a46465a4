"""Manifest validation: Kubernetes OpenAPI (kubernetes-validate, strict) and our OpenShift schemas."""

from __future__ import annotations

import copy
import json
import re
from importlib import resources
from pathlib import Path

import pytest
from render_fixtures import rdma_cluster, tcp_cluster

from mlenv.config.model import DevTools, Security
from mlenv.errors import InputError
from mlenv.render.plan import render_cluster
from mlenv.render.validate import (
    K8S_VERSION,
    OPENSHIFT_SCHEMAS,
    manifest_errors,
    validate_manifests,
)

VARIANTS = [
    (rdma_cluster(), "rdma"),
    (rdma_cluster(security=Security(requires_privileged_scc=True)), "rdma"),
    (rdma_cluster(dev_tools=DevTools(vscode=True, jupyter=True, tensorboard=True)), "rdma"),
    (rdma_cluster(), "tcp"),
    (tcp_cluster(), "tcp"),
]


@pytest.mark.parametrize("cluster,mode", VARIANTS)
def test_rendered_manifests_are_valid(cluster, mode):
    ms = render_cluster(cluster, mode)
    validate_manifests(ms)
    assert all(manifest_errors(m) == [] for m in ms)


def _find(ms, kind):
    return copy.deepcopy(next(m for m in ms if m["kind"] == kind))


def test_unknown_field_in_a_kubernetes_kind_is_named():
    sts = _find(render_cluster(rdma_cluster(), "rdma"), "StatefulSet")
    sts["spec"]["template"]["spec"]["containers"][0]["comand"] = ["x"]
    errs = manifest_errors(sts)
    assert len(errs) == 1
    assert errs[0].startswith("StatefulSet/ml-dev-env: spec.template.spec.containers[0]: ")
    assert "comand" in errs[0]


def test_wrong_type_is_named_with_its_path():
    sts = _find(render_cluster(rdma_cluster(), "rdma"), "StatefulSet")
    sts["spec"]["replicas"] = "two"
    errs = manifest_errors(sts)
    assert errs and errs[0].startswith("StatefulSet/ml-dev-env: spec.replicas: ")


@pytest.mark.parametrize(
    "kind,mutate,path",
    [
        (
            "SecurityContextConstraints",
            lambda m: m.update(allowHostNetwork="yes"),
            "allowHostNetwork",
        ),
        ("SecurityContextConstraints", lambda m: m.pop("volumes"), "(root)"),
        ("SecurityContextConstraints", lambda m: m.update(spec={}), "(root)"),
        (
            "SecurityContextConstraints",
            lambda m: m["runAsUser"].update(type="Sometimes"),
            "runAsUser.type",
        ),
        ("Route", lambda m: m["spec"]["tls"].update(termination="plain"), "spec.tls.termination"),
        ("Route", lambda m: m["spec"].pop("to"), "spec"),
        (
            "Route",
            lambda m: m["spec"]["tls"].update(insecureEdgeTerminationPolicy="Maybe"),
            "spec.tls.insecureEdgeTerminationPolicy",
        ),
        ("ImageStream", lambda m: m["spec"].update(lookup=True), "spec"),
        (
            "BuildConfig",
            lambda m: m["spec"]["strategy"].update(type="Podman"),
            "spec.strategy.type",
        ),
        ("BuildConfig", lambda m: m["spec"]["source"]["git"].pop("uri"), "spec.source.git"),
    ],
)
def test_openshift_schemas_are_strict(kind, mutate, path):
    c = rdma_cluster(dev_tools=DevTools(vscode=True))
    m = _find(render_cluster(c, "rdma"), kind)
    mutate(m)
    errs = manifest_errors(m)
    assert errs, f"{kind} mutation not caught"
    assert any(e.split(": ")[1] == path for e in errs), errs


def test_all_errors_reported_at_once_as_input_error():
    ms = copy.deepcopy(render_cluster(tcp_cluster(), "tcp"))
    for m in ms:
        if m["kind"] == "StatefulSet":
            m["spec"]["replicas"] = -1.5
        if m["kind"] == "Route":
            m["spec"]["tls"]["termination"] = "none"
    with pytest.raises(InputError) as e:
        validate_manifests(ms, "clusters/tcp-lab.yaml (mode tcp)")
    msg = str(e.value)
    assert "clusters/tcp-lab.yaml (mode tcp)" in msg
    assert "StatefulSet/ml-dev-env: spec.replicas" in msg
    assert msg.count("Route/") == 3  # every Route, not just the first
    assert e.value.exit_code == 2


def test_unknown_kind_has_no_schema():
    errs = manifest_errors(
        {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}
    )
    assert errs == ["Widget/w: no schema for apiVersion 'example.com/v1' kind 'Widget'"]


@pytest.mark.parametrize("fname", sorted(OPENSHIFT_SCHEMAS.values()))
def test_openshift_schema_files_are_valid_draft_2020_12(fname):
    import jsonschema

    schema = json.loads(resources.files("mlenv.render").joinpath("schemas", fname).read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["additionalProperties"] is False
    assert {"apiVersion", "kind", "metadata"} <= set(schema["required"])


def test_render_cluster_validates_by_default():
    """deploy calls render_cluster directly: a bad plan must raise before anything is applied."""
    c = rdma_cluster(ssh_port="2222")  # a model built in code with the wrong type
    with pytest.raises(
        InputError,
        match=r"StatefulSet/ml-dev-env: spec\.template\.spec\.containers\[0\]\.ports\[0\]\.containerPort",
    ):
        render_cluster(c, "rdma")
    assert render_cluster(c, "rdma", validate=False)  # the raw plan is still inspectable


@pytest.mark.parametrize("cluster,mode", VARIANTS[:1] + VARIANTS[-1:])
def test_agrees_with_kubernetes_validate_itself(cluster, mode):
    """Our cached validator uses kubernetes-validate's schema files; its own validate() agrees."""
    import kubernetes_validate

    k8s = [
        m
        for m in render_cluster(cluster, mode)
        if (m["apiVersion"], m["kind"]) not in OPENSHIFT_SCHEMAS
    ]
    assert {m["kind"] for m in k8s} >= {"StatefulSet", "Service", "Pod", "ServiceAccount"}
    for m in k8s:
        kubernetes_validate.validate(m, K8S_VERSION, strict=True)
    bad = copy.deepcopy(next(m for m in k8s if m["kind"] == "StatefulSet"))
    bad["spec"]["template"]["spec"]["containers"][0]["comand"] = ["x"]
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, K8S_VERSION, strict=True)
    assert manifest_errors(bad)


def test_dependency_floor_ships_the_pinned_schemas():
    """kubernetes-validate X.Y.0 is the first release with the vX.Y schemas: the floor must reach K8S_VERSION."""
    # a regex, not tomllib: the package supports Python 3.10
    text = (Path(__file__).resolve().parents[3] / "pyproject.toml").read_text()
    (floor,) = re.findall(r'"kubernetes-validate>=([0-9.]+)[",]', text)
    assert tuple(map(int, floor.split(".")))[:2] >= tuple(map(int, K8S_VERSION.split(".")))[:2], (
        floor
    )


def test_the_carried_schemas_are_kubernetes_validates_own():
    """The cluster verbs' install has no kubernetes-validate: mlenv carries the one folder of
    it that it reads. That copy must be the package's folder, whole (a kind missing from it
    would be "no schema", a changed one a different verdict)."""
    import gzip
    import importlib.util
    import json

    from mlenv.render.validate import vendored_schemas_path

    if importlib.util.find_spec("kubernetes_validate") is None:
        pytest.skip("kubernetes-validate (a dev dependency) is not installed")
    from importlib import resources

    folder = resources.files("kubernetes_validate").joinpath(
        "kubernetes-json-schema", f"v{K8S_VERSION}-local-strict"
    )
    theirs = {
        e.name: json.loads(e.read_text()) for e in folder.iterdir() if e.name.endswith(".json")
    }
    ours = json.loads(gzip.decompress(vendored_schemas_path().read_bytes()))
    assert len(theirs) > 700 and ours == theirs, (
        "regenerate with: .venv/bin/python scripts/dev/vendor-k8s-schemas.py"
    )
