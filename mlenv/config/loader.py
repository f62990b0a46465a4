"""Load cluster configs: read, parse with positions, validate (schema + rules), build models.

Public entry points are re-exported by :mod:`mlenv.config`. Nothing here prints or
exits: problems are raised as :class:`~mlenv.errors.ConfigError` (every diagnostic of
every file at once) or :class:`~mlenv.errors.InputError` (no such cluster/file).
"""

from __future__ import annotations

import dataclasses
import difflib
import errno
import os
import stat
from pathlib import Path
from typing import Any

from mlenv.config import hostlist
from mlenv.config.model import (
    Cluster,
    ClusterInfo,
    DevPodResources,
    DevTools,
    ExtendedResource,
    Gpus,
    Hosts,
    Image,
    ImageBuild,
    Mode,
    Nccl,
    Rdma,
    Recheck,
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
from mlenv.config.wizardfile import is_wizard_file
from mlenv.config.wizardfile import summary as wizard_summary
from mlenv.config.yamlpos import MAX_BYTES, Pos, parse, too_large
from mlenv.errors import ConfigError, Diagnostic, InputError

CLUSTERS_DIR = "clusters"


def _root(root: str | os.PathLike[str] | None) -> Path:
    if root is not None:
        return Path(root)
    return Path(os.environ.get("MLENV_ROOT") or os.getcwd())


def cluster_files(root: str | os.PathLike[str] | None = None) -> list[Path]:
    """Every ``clusters/*.yaml`` (and ``*.yml``) under ``root``, sorted by name."""
    folder = _root(root) / CLUSTERS_DIR
    if not folder.is_dir():
        return []
    # links are listed (not followed) so that loading them names the refusal instead of skipping them
    return sorted(
        path
        for path in folder.iterdir()
        if path.suffix in (".yaml", ".yml") and (path.is_file() or path.is_symlink())
    )


def is_bare_name(text: str) -> bool:
    """A cluster name, not a path: no ``/`` and no ``.yaml``/``.yml`` suffix (a
    file named ``barcelona`` in the current folder must not stand in for the cluster)."""
    return not ("/" in text or os.sep in text) and Path(text).suffix not in (".yaml", ".yml")


def _link_refused(path: Path) -> str:
    try:
        target = os.readlink(path)
    except OSError:
        target = "?"
    return (
        f"a symbolic link (to {target}); a cluster config must be a regular file: its content goes into "
        "rendered manifests and sign-off bundles, and a link could bring any file (a kubeconfig with "
        "its token) along"
    )


def resolve(
    name_or_path: str | os.PathLike[str], root: str | os.PathLike[str] | None = None
) -> Path:
    """A cluster name (always ``clusters/<name>.yaml`` or ``.yml`` under ``root``) or a file path → the file.

    Raises:
        InputError: no such file, no such cluster (with a did-you-mean), or the config is a
            symbolic link.
    """
    text = os.fspath(name_or_path)
    path = Path(text)
    if not is_bare_name(text):
        if path.is_symlink():
            raise InputError(f"{text}: {_link_refused(path)}")
        if path.is_file():
            return path
        raise InputError(f"{text}: no such file")
    folder = _root(root) / CLUSTERS_DIR
    for suffix in (".yaml", ".yml"):
        candidate = folder / f"{text}{suffix}"
        if candidate.is_symlink():
            raise InputError(f"{CLUSTERS_DIR}/{candidate.name}: {_link_refused(candidate)}")
        if candidate.is_file():
            return candidate
    names = [candidate.stem for candidate in cluster_files(root)]
    close = difflib.get_close_matches(text, names, n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    known = ", ".join(names) if names else f"none: no {CLUSTERS_DIR}/*.yaml under {_root(root)}"
    raise InputError(f"unknown cluster '{text}'{hint}; known clusters: {known}")


def read_capped(path: Path) -> bytes:
    """The config file's bytes for callers other than the loader (the sign-off bundle), under
    the loader's rules: no link, a regular file, at most MAX_BYTES. InputError otherwise."""
    raw = _read(path)
    if isinstance(raw, Diagnostic):
        raise InputError(f"{path}: {raw.message}")
    if len(raw) > MAX_BYTES:
        raise InputError(f"{path}: {too_large(str(path), len(raw)).message}")
    return raw


def _read(path: Path) -> bytes | Diagnostic:
    """The file's bytes, or why not; never more than MAX_BYTES + 1 bytes are read.

    A multi-GB file is refused from its size, without reading it. A link is refused, not
    followed (O_NOFOLLOW: no window between a check and the open), and so is anything but
    a regular file: a FIFO would block, /dev/zero never ends.
    """
    file = str(path)
    try:
        # O_NONBLOCK: opening a FIFO for reading would wait for a writer; regular files ignore it
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as e:
        if e.errno == errno.ELOOP:
            return Diagnostic(file, 0, 0, "", _link_refused(path))
        return Diagnostic(file, 0, 0, "", f"cannot read: {e.strerror or e}")
    try:
        with os.fdopen(fd, "rb") as handle:
            st = os.fstat(handle.fileno())
            if not stat.S_ISREG(st.st_mode):
                return Diagnostic(file, 0, 0, "", "not a regular file (a device, FIFO or socket)")
            if st.st_size > MAX_BYTES:
                return too_large(file, st.st_size)
            # a file that grows while read: one byte past the cap is enough to notice
            return handle.read(MAX_BYTES + 1)
    except OSError as e:
        return Diagnostic(file, 0, 0, "", f"cannot read: {e.strerror or e}")


def check_file(path: Path) -> tuple[Cluster | None, list[Diagnostic]]:
    """Validate one file without raising: the model (None on any error) and all diagnostics.

    Diagnostics include warnings (``severity == "warning"``), which do not prevent a model.
    """
    file = str(path)
    if not path.name.isprintable():
        # the file name is written into the header of every rendered manifest and
        # script; a newline there would inject lines into them
        return None, [
            Diagnostic(
                repr(file)[1:-1],
                0,
                0,
                "",
                "the config file name contains a control character (newline, "
                "tab, ...): rename the file",
            )
        ]
    raw = _read(path)
    if isinstance(raw, Diagnostic):
        return None, [raw]
    parsed = parse(raw, file)
    if parsed.data is None:
        return None, parsed.diagnostics
    if is_wizard_file(parsed.data):  # not a config at all: one line saying what it is
        pos = parsed.pos(("deployment",), key=True)
        return None, [
            Diagnostic(
                file,
                pos.line,
                pos.col,
                "deployment",
                f"a saved file of upstream ml-dev-env's deployment wizard "
                f"({wizard_summary(parsed.data)}), not a cluster config",
                hint=f"convert it: mlenv wizard --from {file} NAME (writes clusters/NAME.yaml)",
            )
        ]
    diags = list(parsed.diagnostics)
    diags += schema_diagnostics(parsed, file)
    diags += semantic_diagnostics(parsed, file)
    diags.sort(key=lambda diag: (diag.line, diag.col, diag.path, diag.message))
    if any(d.severity == "error" for d in diags):
        return None, diags
    cluster = build(parsed.data, source=path)
    if path.parent.name == CLUSTERS_DIR and path.stem != cluster.name:
        pos = parsed.pos(("cluster", "name"))
        return None, [*diags, _name_mismatch(path, cluster.name, pos)]
    return cluster, diags


def _name_mismatch(path: Path, name: str, pos: Pos) -> Diagnostic:
    """A config in clusters/ is known by its file name, but renders and deploys under its
    cluster.name: the two must agree, or `mlenv render OTHER` writes into k8s/<name>/, the
    committed tree of the config that really is <name>."""
    return Diagnostic(
        str(path),
        pos.line,
        pos.col,
        "cluster.name",
        f"cluster name '{name}' differs from the file name '{path.name}': its manifests would "
        f"go to k8s/{name}/ (the tree of {CLUSTERS_DIR}/{name}.yaml); rename the file to "
        f"{name}{path.suffix} or set cluster.name: {path.stem}",
    )


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
        raise ConfigError([diag for diag in diags if diag.severity == "error"] or diags)
    if warnings is not None:
        warnings += [diag for diag in diags if diag.severity == "warning"]
    return cluster


def refuse_other_tree(cluster: Cluster, root: str | os.PathLike[str] | None = None) -> None:
    """Before rendering into k8s/: a config file outside clusters/ (a saved or upstream
    file, a copy being tried) whose cluster.name is that of a config in clusters/ would
    write over that config's committed tree; refused, naming the file that owns the name.

    Raises:
        InputError: clusters/<cluster.name>.yaml exists and is another file.
    """
    path = cluster.source
    if path is None:
        return
    for suffix in (".yaml", ".yml"):
        owner = _root(root) / CLUSTERS_DIR / f"{cluster.name}{suffix}"
        try:
            same = owner.samefile(path)
        except OSError:
            continue
        if same:
            return
        pos = _name_pos(path)
        raise InputError(
            f"{path}:{pos.line}:{pos.col}: cluster.name: '{cluster.name}' is the cluster of "
            f"{CLUSTERS_DIR}/{owner.name}; rendering this file would write over that config's "
            f"k8s/{cluster.name}/ tree: give it a cluster.name of its own, or render it "
            f"elsewhere with --out DIR"
        )


def load_all(
    root: str | os.PathLike[str] | None = None, *, warnings: list[Diagnostic] | None = None
) -> list[Cluster]:
    """Load every ``clusters/*.yaml``; one ConfigError with the diagnostics of all files.

    Also refuses two files declaring the same ``cluster.name`` (their manifests would
    land in the same ``k8s/<name>/`` folder). ``warnings`` as for :func:`load`.
    """
    clusters: list[Cluster] = []
    errors: list[Diagnostic] = []
    for path in cluster_files(root):
        cluster, diags = check_file(path)
        errors += [diag for diag in diags if diag.severity == "error"]
        if warnings is not None:
            warnings += [diag for diag in diags if diag.severity == "warning"]
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
    for cluster in clusters:
        if cluster.name in first:
            pos = _name_pos(cluster.source)
            out.append(
                Diagnostic(
                    str(cluster.source),
                    pos.line,
                    pos.col,
                    "cluster.name",
                    f"cluster name '{cluster.name}' is also used by {first[cluster.name].source}",
                )
            )
        else:
            first[cluster.name] = cluster
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
    wanted: Mode = "rdma" if mode == "rdma" else "tcp"
    if cluster.effective_mode(wanted) != wanted:
        # two short lines (a terminal of 100 columns): what happens, then the details
        return [
            f"cluster '{cluster.name}': network.rdma.enabled: false, so rdma falls back to TCP\n"
            "  NCCL over sockets (NCCL_IB_DISABLE=1), no RDMA devices, Multus networks or "
            "IPC_LOCK;\n  set network.rdma.enabled: true (with devices and interfaces) once "
            "the cluster has an RDMA fabric"
        ]
    return []


# --- model building (data already validated) ------------------------------------------
# One builder per config section, each filling unset keys from the model's own defaults
# (model.py is the one place defaults live).


def _field_default(cls: type, name: str) -> Any:
    """The declared default of a dataclass field."""
    for f in dataclasses.fields(cls):
        if f.name == name:
            return f.default
    raise KeyError(name)


def _section(data: dict[str, Any], key: str) -> dict[str, Any]:
    """``data[key]`` when it is a mapping, else an empty one (an absent or null section)."""
    value = data.get(key)
    return value if isinstance(value, dict) else {}


def _names(value: Any) -> tuple[str, ...]:
    """A comma string or a list of names as a tuple (empty when neither)."""
    return tuple(split_list(value) or ())


def build(data: dict[str, Any], source: Path | None = None) -> Cluster:
    """The frozen :class:`Cluster` for schema- and rule-valid ``data``, defaults filled in."""
    network = _section(data, "network")
    return Cluster(
        cluster=_cluster_info(_section(data, "cluster")),
        gpu_nodes=_gpu_nodes(data),
        pin_by=str(_section(data, "nodes").get("pin_by") or _field_default(Cluster, "pin_by")),
        topology=_topology(data),
        topology_label=str(_section(data, "nodes").get("topology_label") or ""),
        storage=_storage(_section(data, "storage")),
        rdma=_rdma(_section(network, "rdma")),
        tcp=_tcp(_section(network, "tcp")),
        security=_security(_section(data, "security")),
        gpus=_gpus(_section(data, "gpus")),
        resources=_resources(_section(data, "resources")),
        nccl=_nccl(_section(data, "nccl")),
        image=_image(_section(data, "image")),
        shm_size=data.get("shm_size", _field_default(Cluster, "shm_size")),
        ssh_port=int(data.get("ssh_port", _field_default(Cluster, "ssh_port"))),
        master_port=int(data.get("master_port", _field_default(Cluster, "master_port"))),
        master_port_set="master_port" in data,
        dev_tools=_dev_tools(_section(data, "dev_tools")),
        scheduling=_scheduling(_section(data, "scheduling")),
        notes=data.get("notes", _field_default(Cluster, "notes")),
        platform=data.get("platform", _field_default(Cluster, "platform")),
        slurm=_slurm(_section(data, "slurm")),
        hosts=_hosts(_section(data, "hosts")),
        recheck=_recheck(_section(data, "acceptance")),
        source=source,
    )


def _gpu_nodes(data: dict[str, Any]) -> tuple[str, ...]:
    """``nodes.gpu_nodes``; on Slurm each hostlist (``hgx[01-04]``) becomes its host names, so
    every later step (``--nodelist``, preflight, node counts) sees names."""
    nodes = tuple(_section(data, "nodes").get("gpu_nodes") or ())
    if data.get("platform") == "slurm":
        return tuple(hostlist.expand_all(nodes))
    return nodes


def _topology(data: dict[str, Any]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """``nodes.topology``: (rack, nodes) pairs; on Slurm hostlists become host names."""
    racks = _section(data, "nodes").get("topology") or {}
    slurm = data.get("platform") == "slurm"
    return tuple(
        (str(rack), tuple(hostlist.expand_all(nodes) if slurm else nodes))
        for rack, nodes in racks.items()
    )


def _cluster_info(section: dict[str, Any]) -> ClusterInfo:
    """``cluster:``; name is required by the schema, namespace too except on slurm/hosts."""
    return ClusterInfo(
        name=section["name"],
        namespace=section.get("namespace", ""),
        api=section.get("api", ""),
        description=section.get("description", ""),
    )


def _storage(section: dict[str, Any]) -> Storage:
    """``storage:``; ``existing_claims`` names upstream's claims to reuse."""
    default = Storage()
    claims = section.get("existing_claims") or {}
    return Storage(
        mode=section.get("mode", default.mode),
        class_rwx=section.get("class_rwx", default.class_rwx),
        class_rwo=section.get("class_rwo", default.class_rwo),
        workspace_size=section.get("workspace_size", default.workspace_size),
        datasets_size=section.get("datasets_size", default.datasets_size),
        workspace_claim=claims.get("workspace", ""),
        datasets_claim=claims.get("datasets", ""),
    )


def _rdma(section: dict[str, Any]) -> Rdma:
    """``network.rdma:``; ``devices: auto`` leaves the device list to pod init."""
    default = Rdma()
    devices = section.get("devices", [])
    auto = isinstance(devices, str) and devices.strip() == "auto"
    return Rdma(
        enabled=section.get("enabled", default.enabled),
        devices=() if auto else _names(devices),
        auto_devices=auto,
        interfaces=_names(section.get("interfaces", [])),
        gid_index=int(section.get("gid_index", default.gid_index)),
        gdr_level=int(section.get("gdr_level", default.gdr_level)),
        cross_nic=int(section.get("cross_nic", default.cross_nic)),
        ib_timeout=int(section.get("ib_timeout", default.ib_timeout)),
        min_nchannels=int(section.get("min_nchannels", default.min_nchannels)),
        resources=tuple(
            ExtendedResource(name=name, count=int(count))
            for name, count in sorted(section.get("resources", {}).items())
        ),
        networks=tuple(section.get("networks", ())),
        allow_tcp_fallback=section.get("allow_tcp_fallback", default.allow_tcp_fallback),
    )


def _tcp(section: dict[str, Any]) -> Tcp:
    """``network.tcp:``; ``interface_exclude`` may be written in NCCL_SOCKET_IFNAME's own
    exclusion form (``"^lo,docker0"``), whose caret is dropped here."""
    default = Tcp()
    if "interface_exclude" in section:
        exclude = split_list(section["interface_exclude"])
    else:
        exclude = list(default.interface_exclude)
    if isinstance(section.get("interface_exclude"), str) and exclude and exclude[0].startswith("^"):
        exclude[0] = exclude[0][1:]
    return Tcp(
        interface_exclude=tuple(exclude or ()),
        p2p_level=section.get("p2p_level", default.p2p_level),
    )


def _security(section: dict[str, Any]) -> Security:
    """``security:``."""
    default = Security()
    return Security(
        service_account=section.get("service_account", default.service_account),
        requires_privileged_scc=section.get(
            "requires_privileged_scc", default.requires_privileged_scc
        ),
        ipc_lock=section.get("ipc_lock", default.ipc_lock),
        network_policy=section.get("network_policy", default.network_policy),
        allow_from_namespaces=tuple(section.get("allow_from_namespaces") or ()),
    )


def _gpus(section: dict[str, Any]) -> Gpus:
    """``gpus:``."""
    default = Gpus()
    return Gpus(
        per_node=int(section.get("per_node", default.per_node)),
        type=section.get("type", default.type),
        default_nodes=int(section.get("default_nodes", default.default_nodes)),
    )


def _resources(section: dict[str, Any]) -> Resources:
    """``resources:`` requests and limits; quantities are kept as the text written."""
    dev = _section(section, "dev_pod")
    defaults = DevPodResources()
    return Resources(
        requests=_resource_list(_section(section, "requests")),
        limits=_resource_list(_section(section, "limits")),
        dev_pod=DevPodResources(
            requests=_resource_list(_section(dev, "requests"), defaults.requests),
            limits=_resource_list(_section(dev, "limits"), defaults.limits),
        ),
    )


def _resource_list(section: dict[str, Any], default: ResourceList | None = None) -> ResourceList:
    """Quantities as written; a key left out takes ``default``'s, null unsets it."""

    def text(key: str) -> str | None:
        value = section.get(key, getattr(default, key) if default else None)
        return None if value is None else str(value)

    return ResourceList(cpu=text("cpu"), memory=text("memory"))


def _nccl(section: dict[str, Any]) -> Nccl:
    """``nccl:``; extra variables sorted by name, their values as strings (upstream quotes numbers)."""
    return Nccl(
        debug=section.get("debug", Nccl().debug),
        extra_env=tuple(
            sorted((name, str(value)) for name, value in section.get("env", {}).items())
        ),
    )


def _image(section: dict[str, Any]) -> Image:
    """``image:`` and its ``build:``."""
    default, build_section, build_default = Image(), _section(section, "build"), ImageBuild()
    return Image(
        ref=section.get("ref", default.ref),
        pull_policy=section.get("pull_policy", default.pull_policy),
        build=ImageBuild(
            git_uri=build_section.get("git_uri", build_default.git_uri),
            git_ref=build_section.get("git_ref", build_default.git_ref),
            dockerfile_path=build_section.get("dockerfile_path", build_default.dockerfile_path),
        ),
    )


def _dev_tools(section: dict[str, Any]) -> DevTools:
    """``dev_tools:``: every field by its own name."""
    return DevTools(
        **{f.name: section.get(f.name, f.default) for f in dataclasses.fields(DevTools)}
    )


def _slurm(section: dict[str, Any]) -> Slurm:
    """``slurm:`` with the model's defaults for unset keys; ``slurm.container`` (or the flat
    ``container_image``/``container_mounts`` earlier configs write) is the container."""
    default = Slurm()
    box = section.get("container") or {}
    return Slurm(
        partition=section.get("partition", default.partition),
        account=section.get("account", default.account),
        qos=section.get("qos", default.qos),
        time_limit=str(section.get("time_limit", default.time_limit)),
        constraint=section.get("constraint", default.constraint),
        reservation=section.get("reservation", default.reservation),
        gpu_type=section.get("gpu_type", default.gpu_type),
        sbatch_args=tuple(section.get("sbatch_args") or ()),
        exclusive=section.get("exclusive", default.exclusive),
        gpus_flag=section.get("gpus_flag", default.gpus_flag),
        container_image=box.get("image", section.get("container_image", default.container_image)),
        container_mounts=tuple(box.get("mounts", section.get("container_mounts")) or ()),
        container_runtime=box.get("runtime", default.container_runtime),
        container_writable=box.get("writable", default.container_writable),
        container_mount_home=box.get("mount_home", default.container_mount_home),
        container_env=tuple(box.get("env") or ()),
        container_name=box.get("name", default.container_name),
        shared_dir=section.get("shared_dir", default.shared_dir),
        python=section.get("python", default.python),
        env=tuple((str(k), str(v)) for k, v in (section.get("env") or {}).items()),
        master_addr_suffix=section.get("master_addr_suffix", default.master_addr_suffix),
        modules=tuple(section.get("modules") or ()),
        import_probe=section.get("import_probe", default.import_probe),
    )


def _hosts(section: dict[str, Any]) -> Hosts:
    """``hosts:`` with the model's defaults for unset keys."""
    default = Hosts()
    return Hosts(
        ssh_user=section.get("ssh_user", default.ssh_user),
        ssh_port=int(section.get("ssh_port", default.ssh_port)),
        ssh_key=section.get("ssh_key", default.ssh_key),
        shared_dir=section.get("shared_dir", default.shared_dir),
        python=section.get("python", default.python),
    )


def _recheck(section: dict[str, Any]) -> Recheck:
    """``acceptance:`` with the model's defaults for unset keys."""
    default = Recheck()
    return Recheck(
        schedule=section.get("schedule", default.schedule),
        profile=section.get("profile", default.profile),
        priority_class=section.get("priority_class", default.priority_class),
        runner_image=section.get("runner_image", default.runner_image),
        metrics_push=(section.get("metrics") or {}).get("push", default.metrics_push),
        node_events=section.get("node_events", default.node_events),
    )


def _scheduling(section: dict[str, Any]) -> Scheduling:
    """``scheduling:``; an unset (or null) key stays None so the renderer applies the GPU default."""
    tolerations = section.get("tolerations")
    selector = section.get("node_selector")
    return Scheduling(
        tolerations=None
        if tolerations is None
        else tuple(
            Toleration(
                key=t.get("key", ""),
                operator=t.get("operator", "Equal"),
                value=t.get("value", ""),
                effect=t.get("effect", ""),
                toleration_seconds=t.get("tolerationSeconds"),
            )
            for t in tolerations
        ),
        node_selector=None
        if selector is None
        else tuple(sorted((k, str(v)) for k, v in selector.items())),
    )
