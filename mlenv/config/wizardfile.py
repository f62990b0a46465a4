"""Saved files of upstream ml-dev-env's deployment wizard (``deployment-wizard.py``).

Upstream's wizard saved its answers, not a cluster config: a ``deployment:`` block naming
one of ``clusters/*.yaml`` and the choices made for it (single- or multi-node, RDMA or
TCP, how many nodes), then ``features``, ``image``, ``resources`` and ``storage``.
``make wizard-load CONFIG=file`` read them back. This project deploys cluster configs, so
such a file is recognised (never fed to the schema, whose ten errors said nothing about
what the file is) and converted into one: the named cluster's config with the choices
applied, under a name of its own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

WIZARD_KEYS = frozenset({"deployment", "features", "image", "resources", "storage"})
_GB = re.compile(r"^[0-9]{1,6}$")
# the dev tools both projects know; upstream's pvc_browser and wandb have no counterpart
TOOLS = ("vscode", "jupyter", "tensorboard")


def is_wizard_file(data: object) -> bool:
    """True for a document shaped like upstream's saved wizard answers: only its top-level
    keys, and ``deployment`` a mapping naming a cluster (a cluster config has ``cluster:``
    as a mapping and never a ``deployment:`` key)."""
    if not isinstance(data, dict) or "deployment" not in data:
        return False
    deployment = data["deployment"]
    return (
        set(data) <= WIZARD_KEYS
        and isinstance(deployment, dict)
        and isinstance(deployment.get("cluster"), str)
    )


def summary(data: dict[str, Any]) -> str:
    """``cluster barcelona, multi-node, rdma, 2 node(s)``: what the file asked for."""
    d = data["deployment"]
    parts = [f"cluster {d['cluster']}", str(d.get("mode") or "single-node")]
    if d.get("mode") == "multi-node":
        parts += [str(d.get("network_mode") or "tcp"), f"{d.get('num_nodes') or 2} node(s)"]
    return ", ".join(parts)


@dataclass
class Converted:
    """The cluster config made from a wizard file, and what of the file it could not carry."""

    data: dict[str, Any]
    left_out: list[str] = field(default_factory=list)


class WizardFileError(ValueError):
    """A wizard file's value that has no meaning here; the message names the key."""


def convert(wizard: dict[str, Any], base: dict[str, Any], name: str) -> Converted:
    """``base`` (the named cluster's config, as loaded) with the wizard's choices applied,
    renamed ``name``. ``base`` is not changed."""
    import copy

    data = copy.deepcopy(base)
    out = Converted(data)
    d = wizard["deployment"]
    data.setdefault("cluster", {})["name"] = name
    _mode(d, data, base)
    _features(wizard.get("features"), data, out)
    _image(wizard.get("image"), data)
    _resources(d, wizard.get("resources"), data)
    _storage(wizard.get("storage"), data)
    return out


def _section(data: dict[str, Any], key: str) -> dict[str, Any]:
    value = data.get(key)
    if not isinstance(value, dict):
        value = data[key] = {}
    return value


def _mode(d: dict[str, Any], data: dict[str, Any], base: dict[str, Any]) -> None:
    """single-node: one pod; multi-node: ``num_nodes`` pods over RDMA or TCP."""
    mode = d.get("mode") or "single-node"
    if mode not in ("single-node", "multi-node"):
        raise WizardFileError(f"deployment.mode: {mode!r} is not 'single-node' or 'multi-node'")
    nodes = 1
    if mode == "multi-node":
        nodes = d.get("num_nodes") or 2
        if not isinstance(nodes, int) or isinstance(nodes, bool) or nodes < 1:
            raise WizardFileError(f"deployment.num_nodes: {nodes!r} is not a positive integer")
    _section(data, "gpus")["default_nodes"] = nodes
    net = d.get("network_mode") or "tcp"
    if net not in ("rdma", "tcp"):
        raise WizardFileError(f"deployment.network_mode: {net!r} is not 'rdma' or 'tcp'")
    rdma = (base.get("network") or {}).get("rdma") or {}
    enabled = bool(rdma.get("enabled")) if isinstance(rdma, dict) else False
    if net == "rdma" and not enabled:
        raise WizardFileError(
            "deployment.network_mode: rdma, but the cluster's config has no RDMA "
            "(network.rdma.enabled is not true)"
        )
    if net == "tcp" and enabled:
        # the config's own mode is its RDMA setting: a TCP choice turns RDMA off here
        _section(_section(data, "network"), "rdma")["enabled"] = False


def _features(features: object, data: dict[str, Any], out: Converted) -> None:
    if not isinstance(features, dict):
        return
    tools = {t: bool(features.get(t)) for t in TOOLS if t in features}
    if tools:
        _section(data, "dev_tools").update(tools)
    for key in ("pvc_browser", "wandb"):
        if features.get(key):
            out.left_out.append(f"features.{key}: no counterpart here, not carried over")


def _image(image: object, data: dict[str, Any]) -> None:
    if not isinstance(image, dict) or not image.get("url"):
        return
    url = image["url"]
    if not isinstance(url, str):
        raise WizardFileError(f"image.url: {url!r} is not an image reference")
    _section(data, "image")["ref"] = url


def _resources(d: dict[str, Any], resources: object, data: dict[str, Any]) -> None:
    """A single-node deployment's GPU count is the pod's; multi-node used every GPU."""
    if (d.get("mode") or "single-node") != "single-node" or not isinstance(resources, dict):
        return
    gpus = resources.get("gpus")
    if gpus is None:
        return
    if not isinstance(gpus, int) or isinstance(gpus, bool) or gpus < 1:
        raise WizardFileError(f"resources.gpus: {gpus!r} is not a positive integer")
    _section(data, "gpus")["per_node"] = gpus


def _storage(storage: object, data: dict[str, Any]) -> None:
    """Upstream asked sizes in GB; the config takes quantities (``100Gi``)."""
    if not isinstance(storage, dict):
        return
    for key in ("workspace_size", "datasets_size"):
        if key not in storage:
            continue
        size = str(storage[key])
        if not _GB.match(size):
            raise WizardFileError(f"storage.{key}: {storage[key]!r} is not a size in GB")
        _section(data, "storage")[key] = f"{size}Gi"
