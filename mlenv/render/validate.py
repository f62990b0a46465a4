"""Validate rendered manifests before anything is written or applied.

Kubernetes kinds are checked against the upstream OpenAPI-derived JSON Schemas that the
``kubernetes-validate`` package ships (strict variant: unknown fields are errors; offline;
pinned to ``K8S_VERSION``). The one folder of them mlenv reads is carried in
``mlenv/render/schemas/`` (scripts/dev/vendor-k8s-schemas.py writes it): the package holds
every version since 1.25, 108 MB, more than the rest of the cluster verbs' install. The OpenShift kinds (SCC, Route, BuildConfig, ImageStream)
are checked against the JSON Schemas in ``mlenv/render/schemas/``, written from the
OpenShift API reference. Every error of every manifest is reported at once.
"""

from __future__ import annotations

import functools
import gzip
import json
import re
from collections.abc import Iterable
from importlib import resources
from pathlib import Path
from typing import Any

from mlenv.errors import InputError

# OpenShift 4.20 ships Kubernetes 1.33; pinned so the result does not move with the
# kubernetes-validate release installed.
K8S_VERSION = "1.33.0"

OPENSHIFT_SCHEMAS = {
    ("security.openshift.io/v1", "SecurityContextConstraints"): "securitycontextconstraints.json",
    ("route.openshift.io/v1", "Route"): "route.json",
    ("image.openshift.io/v1", "ImageStream"): "imagestream.json",
    ("build.openshift.io/v1", "BuildConfig"): "buildconfig.json",
}


def vendored_schemas_path() -> Path:
    """The file holding kubernetes-validate's ``v<K8S_VERSION>-local-strict`` folder: one
    JSON object, file name → parsed content, gzip-compressed."""
    return Path(str(resources.files("mlenv.render").joinpath("schemas"))) / (
        f"kubernetes-v{K8S_VERSION}-local-strict.json.gz"
    )


@functools.lru_cache(maxsize=1)
def _k8s_schemas() -> dict[str, Any]:
    # Read once (0.1 s): kubernetes_validate.validate reloaded its 1.4 MB definitions file
    # per call, which made validating a whole tree slow.
    schemas: dict[str, Any] = json.loads(gzip.decompress(vendored_schemas_path().read_bytes()))
    return schemas


@functools.lru_cache(maxsize=1)
def _k8s_registry() -> Any:
    from referencing import Registry, Resource

    return Resource.from_contents(_k8s_schemas()["_definitions.json"]) @ Registry()


@functools.cache
def _validator(api_version: str, kind: str) -> Any:
    import jsonschema

    key = (api_version, kind)
    if key in OPENSHIFT_SCHEMAS:
        text = (
            resources.files("mlenv.render").joinpath("schemas", OPENSHIFT_SCHEMAS[key]).read_text()
        )
        return jsonschema.Draft202012Validator(json.loads(text))
    # same file naming as kubernetes_validate.validate: rbac.authorization.k8s.io/v1 -> rbac-v1
    group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    schema = _k8s_schemas().get(f"{kind.lower()}-{group_version}.json")
    if schema is None:
        return None
    return jsonschema.Draft202012Validator(schema, registry=_k8s_registry())


def _path(parts: Iterable[Any]) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "(root)"


def manifest_errors(manifest: dict[str, Any]) -> list[str]:
    """Every schema violation of one manifest as ``Kind/name: path: message`` lines."""
    kind = str(manifest.get("kind", "?"))
    name = str((manifest.get("metadata") or {}).get("name", "?"))
    api_version = str(manifest.get("apiVersion", ""))
    validator = _validator(api_version, kind)
    if validator is None:
        return [f"{kind}/{name}: no schema for apiVersion {api_version!r} kind {kind!r}"]
    errors = sorted(validator.iter_errors(manifest), key=lambda e: list(map(str, e.absolute_path)))
    return [f"{kind}/{name}: {_path(e.absolute_path)}: {e.message}" for e in errors]


def validate_manifests(manifests: list[dict[str, Any]], source: str = "") -> None:
    """Raise InputError listing every violation in ``manifests`` (nothing if all are valid).

    ``source`` (e.g. ``clusters/x.yaml (rdma)``) prefixes the message so the user knows
    which config produced the bad manifest.
    """
    problems = [p for m in manifests for p in manifest_errors(m)]
    if problems:
        where = f" rendered from {source}" if source else ""
        raise InputError(
            f"{len(problems)} manifest validation error(s){where} "
            f"(Kubernetes {K8S_VERSION} / OpenShift schemas):\n  " + "\n  ".join(problems)
        )
