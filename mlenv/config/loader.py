"""Load cluster configs: read, parse with positions, validate (schema + rules), build models.

Public entry points are re-exported by :mod:`mlenv.config`. Nothing here prints or
exits: problems are raised as :class:`~mlenv.errors.ConfigError` (every diagnostic of
every file at once) or :class:`~mlenv.errors.InputError` (no such cluster/file).
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from pathlib import Path
from typing import Any

from mlenv.config.model import (
    Cluster,
    ClusterInfo,
    DevTools,
    ExtendedResource,
    Gpus,
    Hosts,
    Image,
    ImageBuild,
    Mode,
    Nccl,
    Rdma,
    ResourceList,
    Resources,
    Scheduling,
    Security,
    Slurm,
    Storage,
    Tcp,
    Toleration,
)
from mlenv.config.rules import semantic_diagnostics, split_list
from mlenv.config.schema import schema_diagnostics
from mlenv.config.yamlpos import MAX_BYTES, Pos, parse, too_large
from mlenv.errors import ConfigError, Diagnostic, InputError

CLUSTERS_DIR = "clusters"


def _root(root: str | os.PathLike[str] | None) -> Path:
    if root is not None:
        return Path(root)
    return Path(os.environ.get("MLENV_ROOT") or os.getcwd())


def cluster_files(root: str | os.PathLike[str] | None = None) -> list[Path]:
    """Every ``clusters/*.yaml`` (and ``*.yml``) under ``root``, sorted by name."""
    d = _root(root) / CLUSTERS_DIR
    if not d.is_dir():
        return []
    return sorted(p for p in d.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())


def resolve(name_or_path: str | os.PathLike[str], root: str | os.PathLike[str] | None = None) -> Path:
    """A cluster name (``clusters/<name>.yaml``) or a file path → the file.

    Raises:
        InputError: neither an existing file nor a known cluster name (with a did-you-mean).
    """
    text = os.fspath(name_or_path)
    p = Path(text)
    if p.is_file():
        return p
    looks_like_path = os.sep in text or "/" in text or p.suffix in (".yaml", ".yml")
    if looks_like_path:
        raise InputError(f"{text}: no such file")
    files = cluster_files(root)
    for f in files:
        if f.stem == text:
            return f
    names = [f.stem for f in files]
    close = difflib.get_close_matches(text, names, n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    known = ", ".join(names) if names else f"none: no {CLUSTERS_DIR}/*.yaml under {_root(root)}"
    raise InputError(f"unknown cluster '{text}'{hint}; known clusters: {known}")


def _read(path: Path) -> bytes | Diagnostic:
    """The file's bytes, or why not; never more than MAX_BYTES + 1 bytes are read.

    A multi-GB file (or a device) is refused from its size, without reading it.
    """
    file = str(path)
    try:
        with path.open("rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size > MAX_BYTES:
                return too_large(file, size)
            # st_size is 0 for pipes and devices: read one byte past the cap to notice.
            return f.read(MAX_BYTES + 1)
    except OSError as e:
        return Diagnostic(file, 0, 0, "", f"cannot read: {e.strerror or e}")


def check_file(path: Path) -> tuple[Cluster | None, list[Diagnostic]]:
    """Validate one file without raising: the model (None on any error) and all diagnostics.

    Diagnostics include warnings (``severity == "warning"``), which do not prevent a model.
    """
    file = str(path)
    if not path.name.isprintable():
        # i9.11: the file name is written into the header of every rendered manifest and
        # script; a newline there would inject lines into them
        return None, [Diagnostic(repr(file)[1:-1], 0, 0, "",
                                 "the config file name contains a control character (newline, "
                                 "tab, ...): rename the file")]
    raw = _read(path)
    if isinstance(raw, Diagnostic):
        return None, [raw]
    parsed = parse(raw, file)
    if parsed.data is None:
        return None, parsed.diagnostics
    diags = list(parsed.diagnostics)
    diags += schema_diagnostics(parsed, file)
    diags += semantic_diagnostics(parsed, file)
    diags.sort(key=lambda d: (d.line, d.col, d.path, d.message))
    if any(d.severity == "error" for d in diags):
        return None, diags
    return build(parsed.data, source=path), diags


def load(
    name_or_path: str | os.PathLike[str],
    root: str | os.PathLike[str] | None = None,
    *,
    warnings: list[Diagnostic] | None = None,
) -> Cluster:
    """Load and validate one cluster config.

    Args:
        name_or_path: a cluster name (``clusters/<name>.yaml`` under ``root``) or a file path.
        root: directory holding ``clusters/``; default ``$MLENV_ROOT`` or the cwd.
        warnings: if given, the file's warning diagnostics are appended to it (the
            caller decides whether to show them; they never prevent loading).

    Raises:
        InputError: no such file or cluster.
        ConfigError: the file is invalid; carries every diagnostic of the file.
    """
    cluster, diags = check_file(resolve(name_or_path, root))
    if cluster is None:
        raise ConfigError([d for d in diags if d.severity == "error"] or diags)
    if warnings is not None:
        warnings += [d for d in diags if d.severity == "warning"]
    return cluster


def load_all(
    root: str | os.PathLike[str] | None = None, *, warnings: list[Diagnostic] | None = None
) -> list[Cluster]:
    """Load every ``clusters/*.yaml``; one ConfigError with the diagnostics of all files.

    Also refuses two files declaring the same ``cluster.name`` (their manifests would
    land in the same ``k8s/<name>/`` folder). ``warnings`` as for :func:`load`.
    """
    clusters: list[Cluster] = []
    errors: list[Diagnostic] = []
    for f in cluster_files(root):
        cluster, diags = check_file(f)
        errors += [d for d in diags if d.severity == "error"]
        if warnings is not None:
            warnings += [d for d in diags if d.severity == "warning"]
        if cluster is not None:
            clusters.append(cluster)
    errors += duplicate_names(clusters)
    if errors:
        raise ConfigError(errors)
    return clusters


def duplicate_names(clusters: list[Cluster]) -> list[Diagnostic]:
    """A diagnostic for each cluster whose ``cluster.name`` an earlier file already used."""
    first: dict[str, Cluster] = {}
    out: list[Diagnostic] = []
    for c in clusters:
        if c.name in first:
            pos = _name_pos(c.source)
            out.append(
                Diagnostic(
                    str(c.source), pos.line, pos.col, "cluster.name",
                    f"cluster name '{c.name}' is also used by {first[c.name].source}",
                )
            )
        else:
            first[c.name] = c
    return out


def _name_pos(source: Path | None) -> Pos:
    """Where ``cluster.name`` is written in ``source`` (1:1 if it cannot be told).

    Re-parses the file: this runs only for the rare duplicate, and keeps source
    positions out of the frozen model.
    """
    raw = _read(source) if source is not None else None
    if not isinstance(raw, bytes):
        return Pos(1, 1)
    return parse(raw, str(source)).pos(("cluster", "name"))


def mode_warnings(cluster: Cluster, mode: str) -> list[str]:
    """Warnings for deploying ``cluster`` in ``mode`` (``rdma`` | ``tcp``).

    Raises:
        InputError: ``mode`` is neither ``rdma`` nor ``tcp``.
    """
    if mode not in ("rdma", "tcp"):
        raise InputError(f"unknown mode {mode!r}: expected rdma or tcp")
    m: Mode = "rdma" if mode == "rdma" else "tcp"
    if cluster.effective_mode(m) != m:
        where = f" ({cluster.source})" if cluster.source else ""
        return [
            f"cluster '{cluster.name}'{where} has network.rdma.enabled: false, so MODE=rdma "
            "falls back to TCP: NCCL runs over sockets (NCCL_IB_DISABLE=1), no RDMA devices, "
            "Multus networks or IPC_LOCK are requested. Set network.rdma.enabled: true with "
            "devices and interfaces once the cluster has an RDMA fabric."
        ]
    return []


# --- model building (data already validated) ------------------------------------------


def _default(cls: type, name: str) -> Any:
    """The declared default of a dataclass field (model.py is the one place defaults live)."""
    for f in dataclasses.fields(cls):
        if f.name == name:
            return f.default
    raise KeyError(name)


def _d(data: dict[str, Any], key: str) -> dict[str, Any]:
    v = data.get(key)
    return v if isinstance(v, dict) else {}


def _strs(value: Any) -> tuple[str, ...]:
    return tuple(split_list(value) or ())


def build(data: dict[str, Any], source: Path | None = None) -> Cluster:
    """The frozen :class:`Cluster` for schema- and rule-valid ``data``, defaults filled in."""
    c = _d(data, "cluster")
    storage = _d(data, "storage")
    net = _d(data, "network")
    rdma = _d(net, "rdma")
    tcp = _d(net, "tcp")
    sec = _d(data, "security")
    gpus = _d(data, "gpus")
    res = _d(data, "resources")
    nccl = _d(data, "nccl")
    image = _d(data, "image")
    ib = _d(image, "build")
    tools = _d(data, "dev_tools")

    rd, td, sd, gd, nd = Rdma(), Tcp(), Storage(), Gpus(), Nccl()
    raw_devices = rdma.get("devices", [])
    auto = isinstance(raw_devices, str) and raw_devices.strip() == "auto"
    exclude = split_list(tcp["interface_exclude"]) if "interface_exclude" in tcp else list(td.interface_exclude)
    if isinstance(tcp.get("interface_exclude"), str) and exclude and exclude[0].startswith("^"):
        exclude[0] = exclude[0][1:]

    def rl(d: dict[str, Any]) -> ResourceList:
        def q(v: Any) -> str | None:
            return None if v is None else str(v)

        return ResourceList(cpu=q(d.get("cpu")), memory=q(d.get("memory")))

    return Cluster(
        cluster=ClusterInfo(
            name=c["name"],
            namespace=c["namespace"],
            api=c.get("api", ""),
            description=c.get("description", ""),
        ),
        gpu_nodes=tuple(_d(data, "nodes").get("gpu_nodes") or ()),
        storage=Storage(
            mode=storage.get("mode", sd.mode),
            class_rwx=storage.get("class_rwx", sd.class_rwx),
            class_rwo=storage.get("class_rwo", sd.class_rwo),
            workspace_size=storage.get("workspace_size", sd.workspace_size),
            datasets_size=storage.get("datasets_size", sd.datasets_size),
            workspace_claim=(storage.get("existing_claims") or {}).get("workspace", ""),
            datasets_claim=(storage.get("existing_claims") or {}).get("datasets", ""),
        ),
        rdma=Rdma(
            enabled=rdma.get("enabled", rd.enabled),
            devices=() if auto else _strs(raw_devices),
            auto_devices=auto,
            interfaces=_strs(rdma.get("interfaces", [])),
            gid_index=int(rdma.get("gid_index", rd.gid_index)),
            gdr_level=int(rdma.get("gdr_level", rd.gdr_level)),
            cross_nic=int(rdma.get("cross_nic", rd.cross_nic)),
            ib_timeout=int(rdma.get("ib_timeout", rd.ib_timeout)),
            min_nchannels=int(rdma.get("min_nchannels", rd.min_nchannels)),
            resources=tuple(
                ExtendedResource(name=k, count=int(v)) for k, v in sorted(rdma.get("resources", {}).items())
            ),
            networks=tuple(rdma.get("networks", ())),
            allow_tcp_fallback=rdma.get("allow_tcp_fallback", rd.allow_tcp_fallback),
        ),
        tcp=Tcp(interface_exclude=tuple(exclude or ()), p2p_level=tcp.get("p2p_level", td.p2p_level)),
        security=Security(
            service_account=sec.get("service_account", Security().service_account),
            requires_privileged_scc=sec.get("requires_privileged_scc", Security().requires_privileged_scc),
            ipc_lock=sec.get("ipc_lock", Security().ipc_lock),
            network_policy=sec.get("network_policy", Security().network_policy),
            allow_from_namespaces=tuple(sec.get("allow_from_namespaces") or ()),
        ),
        gpus=Gpus(
            per_node=int(gpus.get("per_node", gd.per_node)),
            type=gpus.get("type", gd.type),
            default_nodes=int(gpus.get("default_nodes", gd.default_nodes)),
        ),
        resources=Resources(requests=rl(_d(res, "requests")), limits=rl(_d(res, "limits"))),
        nccl=Nccl(
            debug=nccl.get("debug", nd.debug),
            extra_env=tuple(sorted((k, str(v)) for k, v in nccl.get("env", {}).items())),
        ),
        image=Image(
            ref=image.get("ref", Image().ref),
            pull_policy=image.get("pull_policy", Image().pull_policy),
            build=ImageBuild(
                git_uri=ib.get("git_uri", ImageBuild().git_uri),
                git_ref=ib.get("git_ref", ImageBuild().git_ref),
                dockerfile_path=ib.get("dockerfile_path", ImageBuild().dockerfile_path),
            ),
        ),
        shm_size=data.get("shm_size", _default(Cluster, "shm_size")),
        ssh_port=int(data.get("ssh_port", _default(Cluster, "ssh_port"))),
        master_port=int(data.get("master_port", _default(Cluster, "master_port"))),
        dev_tools=DevTools(**{f.name: tools.get(f.name, f.default) for f in dataclasses.fields(DevTools)}),
        scheduling=_scheduling(_d(data, "scheduling")),
        notes=data.get("notes", _default(Cluster, "notes")),
        platform=data.get("platform", _default(Cluster, "platform")),
        slurm=_slurm(_d(data, "slurm")),
        hosts=_hosts(_d(data, "hosts")),
        source=source,
    )


def _slurm(s: dict[str, Any]) -> Slurm:
    """``slurm:`` with the model's defaults for unset keys."""
    d = Slurm()
    return Slurm(
        partition=s.get("partition", d.partition), account=s.get("account", d.account),
        qos=s.get("qos", d.qos), time_limit=str(s.get("time_limit", d.time_limit)),
        constraint=s.get("constraint", d.constraint), exclusive=s.get("exclusive", d.exclusive),
        gpus_flag=s.get("gpus_flag", d.gpus_flag), container_image=s.get("container_image", d.container_image),
        container_mounts=tuple(s.get("container_mounts") or ()), shared_dir=s.get("shared_dir", d.shared_dir),
        python=s.get("python", d.python),
    )


def _hosts(h: dict[str, Any]) -> Hosts:
    """``hosts:`` with the model's defaults for unset keys."""
    d = Hosts()
    return Hosts(
        ssh_user=h.get("ssh_user", d.ssh_user), ssh_port=int(h.get("ssh_port", d.ssh_port)),
        ssh_key=h.get("ssh_key", d.ssh_key), shared_dir=h.get("shared_dir", d.shared_dir),
        python=h.get("python", d.python),
    )


def _scheduling(sched: dict[str, Any]) -> Scheduling:
    """``scheduling:``; an unset (or null) key stays None so the renderer applies the GPU default."""
    tols = sched.get("tolerations")
    sel = sched.get("node_selector")
    return Scheduling(
        tolerations=None if tols is None else tuple(
            Toleration(key=t.get("key", ""), operator=t.get("operator", "Equal"), value=t.get("value", ""),
                       effect=t.get("effect", ""), toleration_seconds=t.get("tolerationSeconds"))
            for t in tols
        ),
        node_selector=None if sel is None else tuple(sorted((k, str(v)) for k, v in sel.items())),
    )
