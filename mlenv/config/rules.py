"""Semantic rules the JSON Schema cannot express: names, quantities, cross-field consistency.

They run even when the schema found errors (so one run reports everything) and
therefore read the raw data defensively: a value of the wrong type was already
reported by the schema and is simply skipped here.
"""

from __future__ import annotations

import dataclasses
import re
from decimal import Decimal, InvalidOperation
from typing import Any

from mlenv import argv
from mlenv.config import hostlist
from mlenv.config.model import Cluster
from mlenv.config.yamlpos import JsonPath, Parsed, format_path
from mlenv.contract import MAX_NODES, push_url
from mlenv.errors import Diagnostic, InputError

# Every pattern ends in \Z, not $: Python's $ also matches before a trailing newline,
# so "demo\n" would pass as a name and become a folder and a manifest name.
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")
# Kubernetes resource.Quantity: a non-negative decimal with a binary-SI, decimal-SI or
# exponent suffix (apimachinery/pkg/api/resource/quantity.go).
_QUANTITY = re.compile(
    r"^(?P<num>[0-9]+(\.[0-9]*)?|\.[0-9]+)(?P<suf>Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][-+]?[0-9]+)?\Z"
)
_SUFFIX = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
}
_IFNAME = re.compile(r"^[A-Za-z0-9_.:-]{1,15}\Z")  # Linux IFNAMSIZ is 16 with the NUL
_HCA = re.compile(r"^[A-Za-z0-9_.-]+\Z")
# NCCL_IB_HCA's device:port form (mlx5_0:1); on slurm/hosts only, where the value goes to
# NCCL as written (pods match device names against /sys/class/infiniband).
_HCA_PORT = re.compile(r"^[A-Za-z0-9_.-]+(:[0-9]{1,3})?\Z")
# A quoted integer such as gid_index: "3"; ASCII only (str.isdigit() also accepts "²").
_DIGITS = re.compile(r"[0-9]+")
# Kubernetes caps every quantity at 2^63-1 base units (apimachinery resource.Quantity).
MAX_QUANTITY = Decimal(2**63 - 1)
_DEFAULT_PORTS = {
    f.name: f.default for f in dataclasses.fields(Cluster) if f.name in ("ssh_port", "master_port")
}
# NCCL variables that structured keys already set; setting them twice would be ambiguous.
RESERVED_NCCL = {
    "NCCL_DEBUG": "nccl.debug",
    "NCCL_IB_DISABLE": "network.rdma.enabled and the deploy mode",
    "NCCL_IB_HCA": "network.rdma.devices",
    "NCCL_IB_GID_INDEX": "network.rdma.gid_index",
    "NCCL_NET_GDR_LEVEL": "network.rdma.gdr_level",
    "NCCL_CROSS_NIC": "network.rdma.cross_nic",
    "NCCL_IB_TIMEOUT": "network.rdma.ib_timeout",
    "NCCL_MIN_NCHANNELS": "network.rdma.min_nchannels",
    "NCCL_SOCKET_IFNAME": "network.rdma.interfaces / network.tcp.interface_exclude",
    "NCCL_P2P_LEVEL": "network.tcp.p2p_level",
}


def parse_quantity(text: str) -> Decimal | None:
    """A Kubernetes quantity as a Decimal in base units, or None when it is not one.

    A well-formed quantity too large to compute (``1e999999999``) comes back as
    ``Decimal("Infinity")``: callers compare it with :data:`MAX_QUANTITY`.
    """
    m = _QUANTITY.match(text)
    if not m:
        return None
    suf = m.group("suf") or ""
    try:
        num = Decimal(m.group("num"))
        if suf not in _SUFFIX:  # an exponent (1e3); "E" and "Ei" are exa and exbi
            exp = suf[1:]
            # int() of a 5000-digit exponent raises; any exponent this long overflows anyway.
            if len(exp.lstrip("+-").lstrip("0")) > 6:
                return Decimal("Infinity") if not exp.startswith("-") else Decimal(0)
            return num * (Decimal(10) ** int(exp))
        return num * _SUFFIX[suf]
    except InvalidOperation:
        return None
    except ArithmeticError:  # decimal.Overflow: the exponent is beyond Decimal's range
        return Decimal("Infinity")


def split_list(value: Any) -> list[str] | None:
    """A comma string (``"mlx5_6, mlx5_7"``) or a list → list of names; None if neither."""
    if isinstance(value, str):
        return [p.strip() for p in value.split(",") if p.strip()]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return [v.strip() for v in value]
    return None


def _get(data: Any, *path: str) -> Any:
    for p in path:
        if not isinstance(data, dict):
            return None
        data = data.get(p)
    return data


# Upstream ml-dev-env's discover_cluster.py wrote these four whatever it found.
UPSTREAM_DISCOVERED_INTERFACES = ["net1", "net2", "net3", "net4"]


def _upstream_discovered_hint(interfaces: list[str], devices: list[str]) -> str:
    """The fix for a config upstream's discovery wrote: its interfaces were always net1-net4."""
    if interfaces != UPSTREAM_DISCOVERED_INTERFACES:
        return ""
    want = ",".join(f"net{i + 1}" for i in range(len(devices)))
    return (
        f"upstream's discover_cluster.py always wrote net1-net4: with {len(devices)} device(s) "
        f'write interfaces: "{want}", or write a fresh '
        "config with `mlenv discover NAME --namespace NS`"
    )


class _Rules:
    def __init__(self, parsed: Parsed, file: str) -> None:
        self.parsed = parsed
        self.data = parsed.data
        self.file = file
        self.out: list[Diagnostic] = []

    def err(
        self,
        path: JsonPath,
        message: str,
        hint: str = "",
        *,
        key: bool = False,
        severity: str = "error",
    ) -> None:
        pos = self.parsed.pos(path, key=key)
        self.out.append(
            Diagnostic(self.file, pos.line, pos.col, format_path(path), message, hint, severity)
        )

    def warn(self, path: JsonPath, message: str, hint: str = "", *, key: bool = False) -> None:
        self.err(path, message, hint, key=key, severity="warning")

    # --- names -------------------------------------------------------------------------

    def label(self, path: JsonPath, what: str) -> None:
        value = _get(self.data, *[str(p) for p in path])
        if not isinstance(value, str):
            return
        if len(value) > 63:
            self.err(
                path,
                f"{what} {value[:20]!r}... is {len(value)} characters; a DNS-1123 label has at most 63",
            )
        elif not _LABEL.match(value):
            self.err(
                path,
                f"{what} {value!r} is not a DNS-1123 label (lowercase letters, digits and '-', starting and ending with a letter or digit)",
                _fix_hint(value),
            )

    def subdomain(self, path: JsonPath, value: Any, what: str) -> None:
        if not isinstance(value, str):
            return
        if len(value) > 253:
            self.err(
                path, f"{what} is {len(value)} characters; a DNS-1123 subdomain has at most 253"
            )
        elif not _SUBDOMAIN.match(value) or any(len(p) > 63 for p in value.split(".")):
            self.err(
                path,
                f"{what} {value!r} is not a DNS-1123 subdomain (lowercase letters, digits, '-' and '.')",
                _fix_hint(value),
            )

    # --- quantities ----------------------------------------------------------------------

    def quantity(self, path: JsonPath, *, positive: bool = True) -> Decimal | None:
        value = _get(self.data, *[str(p) for p in path])
        if value is None or isinstance(value, bool):
            return None
        if isinstance(value, (int, float)):
            value = str(value)
        if not isinstance(value, str):
            return None
        # Not stripped: Kubernetes refuses " 8Gi ", and the value is rendered as written.
        q = parse_quantity(value)
        if q is None:
            self.err(
                path,
                f"{value!r} is not a Kubernetes quantity (e.g. 100Gi, 512Mi, 8, 500m)",
                _quantity_hint(value),
            )
            return None
        if q > MAX_QUANTITY:
            shown = value if len(value) <= 40 else value[:37] + "..."
            self.err(
                path,
                f"{shown!r} is too large for a Kubernetes quantity (at most 2^63-1 base units)",
            )
            return None
        if positive and q <= 0:
            self.err(path, f"{value!r} must be greater than zero")
            return None
        return q

    # --- the rules ---------------------------------------------------------------------

    @property
    def plat(self) -> str:
        """The config's platform ('openshift' when unset or not a string: the schema said so)."""
        p = self.data.get("platform", "openshift") if isinstance(self.data, dict) else "openshift"
        return p if isinstance(p, str) else "openshift"

    @property
    def off_k8s(self) -> bool:
        """slurm or hosts: grammars widen per key where Slurm and ssh take what Kubernetes does not."""
        return self.plat in ("slurm", "hosts")

    def run(self) -> list[Diagnostic]:
        if not isinstance(self.data, dict):
            return self.out
        self.label(("cluster", "name"), "cluster name")
        self.label(("cluster", "namespace"), "namespace")
        self.subdomain(
            ("security", "service_account"),
            _get(self.data, "security", "service_account"),
            "service account",
        )
        self.service_account()
        for key in ("class_rwx", "class_rwo"):
            sc = _get(self.data, "storage", key)
            if sc != "":  # "" = the cluster's default storage class
                self.subdomain(("storage", key), sc, "storage class")
        self.image()
        self.free_text()
        self.gpu_nodes()
        self.topology()
        self.recheck()
        for key in ("workspace", "datasets"):
            claim = _get(self.data, "storage", "existing_claims", key)
            if claim is not None:
                self.subdomain(("storage", "existing_claims", key), claim, "claim name")
        for key in ("workspace_size", "datasets_size"):
            self.quantity(("storage", key))
        self.quantity(("shm_size",))
        self.resources()
        self.rdma()
        self.tcp()
        self.gpus()
        self.nccl_env()
        self.quoted_integers()
        self.platform()
        ssh, master = (
            _as_int(self.data.get(k, _DEFAULT_PORTS[k])) for k in ("ssh_port", "master_port")
        )
        if ssh is not None and ssh == master:
            key = "master_port" if "master_port" in self.data else "ssh_port"
            self.err((key,), f"ssh_port and master_port are both {ssh}; they must differ")
        return self.out

    def gpu_nodes(self) -> None:
        """Node names per platform: DNS-1123 subdomains on Kubernetes; real host names on
        hosts (``Lambda-H100-2``, ``GPU_Node7``); those and hostlists (``hgx[01-04]``) on Slurm."""
        nodes = _get(self.data, "nodes", "gpu_nodes")
        if not isinstance(nodes, list):
            return
        seen: set[str] = set()
        for i, n in enumerate(nodes):
            path: JsonPath = ("nodes", "gpu_nodes", i)
            names = self.node_names(path, n)
            if not self.off_k8s:  # a name twice: the schema's uniqueItems already says so
                continue
            twice = [x for x in names if x in seen]
            if twice:
                self.err(
                    path,
                    f"node {twice[0]} is listed twice"
                    + (f" ({n} expands to it)" if n != twice[0] else ""),
                )
            seen.update(names)

    def node_names(self, path: JsonPath, n: Any) -> list[str]:
        """One node entry checked as the platform names nodes; the names it stands for ([] when bad)."""
        if not isinstance(n, str):
            return []
        if not self.off_k8s:
            before = len(self.out)
            self.subdomain(path, n, "node name")
            return [n] if len(self.out) == before else []
        if self.plat == "hosts" and not hostlist.HOST.fullmatch(n):
            self.err(
                path,
                f"host name {_short(n)} is not valid (letters, digits, '-', '_', '.', starting "
                "and ending with a letter or digit)",
            )
            return []
        try:
            return list(hostlist.expand(n))
        except hostlist.HostlistError as e:
            self.err(path, f"node {_short(n)}: {e}")
            return []

    def topology(self) -> None:
        """``nodes.topology``: rack names are DNS-1123 labels, nodes are named as
        ``gpu_nodes`` names them, and no node is in two racks."""
        racks = _get(self.data, "nodes", "topology")
        label = _get(self.data, "nodes", "topology_label")
        if isinstance(label, str) and label:
            # One source of racks: a list beside a label could disagree with it unseen.
            if isinstance(racks, dict) and racks:
                self.err(
                    ("nodes", "topology_label"),
                    "nodes.topology_label and nodes.topology both give the "
                    "racks: keep one (the list, or the Node label read at launch)",
                    key=True,
                )
            elif self.off_k8s:
                self.warn(
                    ("nodes", "topology_label"),
                    f"nodes.topology_label reads Kubernetes Node labels; "
                    f"platform {self.plat} ignores it"
                    + (
                        " (Slurm's topology/tree is read by itself)" if self.plat == "slurm" else ""
                    ),
                    key=True,
                )
        if not isinstance(racks, dict):
            return
        where: dict[str, str] = {}
        for rack, nodes in racks.items():
            rack_path: JsonPath = ("nodes", "topology", str(rack))
            if not isinstance(rack, str) or len(rack) > 63 or not _LABEL.match(rack):
                self.err(
                    rack_path,
                    f"rack name {_short(str(rack))} is not a DNS-1123 label (lowercase letters, "
                    "digits and '-', at most 63 characters: rack-a, r12, leaf03)",
                    key=True,
                )
            for i, n in enumerate(nodes if isinstance(nodes, list) else []):
                for name in self.node_names((*rack_path, i), n):
                    if name in where and where[name] != rack:
                        self.err(
                            (*rack_path, i),
                            f"node {name} is in two racks ({where[name]} and {rack})",
                        )
                    where.setdefault(name, str(rack))

    def recheck(self) -> None:
        """``acceptance:``: each cron field within its range (the schema checked the
        characters); the PriorityClass a name; the runner image a reference. The two
        Kubernetes-only keys are warnings elsewhere."""
        sec = _get(self.data, "acceptance")
        if not isinstance(sec, dict):
            return
        sched = sec.get("schedule")
        if isinstance(sched, str) and sched and not sched.startswith("@"):
            why = cron_problem(sched)
            if why:
                self.err(
                    ("acceptance", "schedule"),
                    f"{_short(sched)}: {why}",
                    "minute 0-59, hour 0-23, day of month 1-31, month 1-12, day of week 0-7 (0 and 7 are Sunday)",
                )
        pc = sec.get("priority_class")
        if isinstance(pc, str) and pc:
            self.subdomain(("acceptance", "priority_class"), pc, "PriorityClass name")
        img = sec.get("runner_image")
        if isinstance(img, str) and img and not _IMAGE_REF.fullmatch(img):
            self.err(
                ("acceptance", "runner_image"),
                f"{_short(img)} is not an image reference "
                "(registry/name[:tag][@sha256:digest], no spaces or control characters)",
            )
        push = _get(self.data, "acceptance", "metrics", "push")
        if isinstance(push, str) and push:
            try:
                push_url(push, "")
            except InputError as e:
                self.err(("acceptance", "metrics", "push"), str(e).strip())
        if self.off_k8s:
            if sec.get("node_events"):
                self.warn(
                    ("acceptance", "node_events"),
                    f"acceptance.node_events tells Kubernetes Nodes; platform {self.plat} ignores it",
                    key=True,
                )
            for key in ("priority_class", "runner_image"):
                if sec.get(key):
                    self.warn(
                        ("acceptance", key),
                        f"acceptance.{key} is for the Kubernetes CronJob; "
                        f"platform {self.plat} ignores it",
                        key=True,
                    )

    def node_count(self) -> int | None:
        """How many nodes ``nodes.gpu_nodes`` names (hostlists expanded on Slurm); None if unreadable."""
        nodes = _get(self.data, "nodes", "gpu_nodes")
        if not isinstance(nodes, list) or not all(isinstance(n, str) for n in nodes):
            return None
        if self.plat != "slurm":
            return len(nodes)
        try:
            return len(hostlist.expand_all(nodes))
        except hostlist.HostlistError:
            return None

    # --- platforms ------------------------------------------------------------

    def platform(self) -> None:
        """``slurm:``/``hosts:`` values reach batch scripts and ssh command lines: each is
        checked here (and quoted there). Keys meant for another platform are warnings."""
        plat = self.data.get("platform", "openshift")
        if not isinstance(plat, str):
            return
        for section in ("slurm", "hosts"):
            if section in self.data and plat != section:
                self.warn(
                    (section,),
                    f"'{section}:' applies to platform: {section}, but this config's "
                    f"platform is {plat}: it is ignored",
                    f"set 'platform: {section}' or remove the section",
                    key=True,
                )
        if plat in ("slurm", "hosts"):
            shared = plat == "slurm" and _get(self.data, "slurm", "exclusive") is False
            for key, why in _K8S_ONLY.items():
                if key not in self.data:
                    continue
                if key == "resources" and shared:
                    # slurm.exclusive: false asks for resources.requests (--cpus-per-task,
                    # --mem); only the limits mean nothing there
                    if _get(self.data, "resources", "limits"):
                        self.warn(
                            ("resources", "limits"),
                            "resources.limits are the containers' limits; platform slurm "
                            "ignores them (resources.requests become --cpus-per-task and --mem)",
                            key=True,
                        )
                    continue
                self.warn((key,), f"'{key}' is {why}; platform {plat} ignores it", key=True)
            ref = _get(self.data, "image", "ref")
            if isinstance(ref, str) and ref:
                where = "slurm.container_image" if plat == "slurm" else "the hosts' own Python"
                self.warn(
                    ("image", "ref"),
                    f"image.ref is the pods' image; platform {plat} ignores it (use {where})",
                )
        self.slurm(plat == "slurm")
        self.hosts(plat == "hosts")

    def slurm(self, active: bool) -> None:
        s = _get(self.data, "slurm")
        s = s if isinstance(s, dict) else {}
        base: JsonPath = ("slurm",)
        # No partition is a site's choice (MareNostrum 5, Perlmutter: -q/-C/-A pick the
        # nodes); shared_dir is where the job's files live, so it stays required.
        if active and not s.get("shared_dir"):
            self.err(
                (*base, "shared_dir")
                if "shared_dir" in s
                else ((*base,) if "slurm" in self.data else ("platform",)),
                "slurm.shared_dir is required on platform: slurm",
                "a filesystem every node sees, e.g. /shared/mlenv",
                key="shared_dir" not in s,
            )
        acct = s.get("account")
        if isinstance(acct, str) and acct and not _SLURM_ACCOUNT.fullmatch(acct):
            self.err(
                (*base, "account"),
                f"{_short(acct)} is not a Slurm account name (letters, digits, '_', '.', '@', "
                "'-', not starting with '-' or '@', at most 64 characters)",
            )
        for key in ("partition", "qos", "reservation", "gpu_type"):
            v = s.get(key)
            # partition and reservation take comma lists (sbatch: the first that can start it)
            words = (
                v.split(",") if isinstance(v, str) and key in ("partition", "reservation") else [v]
            )
            if (
                isinstance(v, str)
                and v
                and not all(isinstance(w, str) and _SLURM_WORD.fullmatch(w) for w in words)
            ):
                self.err(
                    (*base, key),
                    f"{_short(v)} is not a plain Slurm name (letters, digits, '_', '.', "
                    "'-', not starting with '-', at most 64 characters"
                    + (
                        ", or a comma list of them)" if key in ("partition", "reservation") else ")"
                    ),
                )
        v = s.get("constraint")
        if isinstance(v, str) and v:
            try:
                argv.slurm_constraint(v)
            except argv.UnsafeArgument as e:
                self.err((*base, "constraint"), str(e))
        self.sbatch_args(s)
        tl = s.get("time_limit")
        if isinstance(tl, str):
            minutes = slurm_minutes(tl)
            if minutes is None:
                self.err(
                    (*base, "time_limit"),
                    f"{_short(tl)} is not a Slurm time (minutes, MM:SS, HH:MM:SS, "
                    "D-HH, D-HH:MM or D-HH:MM:SS)",
                )
            elif minutes <= 0:
                self.err((*base, "time_limit"), f"{_short(tl)} is zero: the job could not run")
        self._abs_path((*base, "shared_dir"), s.get("shared_dir"))
        self._python((*base, "python"), s.get("python"))
        self.container(s)
        self.job_env(s)
        suffix = s.get("master_addr_suffix")
        if isinstance(suffix, str) and suffix and not _ADDR_SUFFIX.fullmatch(suffix):
            self.err(
                (*base, "master_addr_suffix"),
                f"{_short(suffix)} is not a host name suffix (letters, digits, '.', '-', at most "
                "63 characters; e.g. 'i' for JUWELS' InfiniBand names)",
            )
        mods = s.get("modules")
        if isinstance(mods, list):
            for i, m in enumerate(mods):
                if isinstance(m, str) and not _MODULE.fullmatch(m):
                    self.err(
                        (*base, "modules", i),
                        f"{_short(m)} is not a module name (letters, digits, '_', '.', '+', '-', "
                        "'/' between parts, e.g. Stages/2024 or PyTorch/2.1.2-foss-2023a; no "
                        "spaces, options or shell metacharacters)",
                    )

    def container(self, s: dict[str, Any]) -> None:
        """``slurm.container`` (or the flat ``container_image``/``container_mounts``): the
        image and mounts in its runtime's grammar; the pyxis-only keys on pyxis; no mount that
        would hide ``shared_dir``."""
        box = s.get("container")
        box = box if isinstance(box, dict) else {}
        base: JsonPath = ("slurm", "container")
        for flat, key in (("container_image", "image"), ("container_mounts", "mounts")):
            if flat in s and key in box:
                self.err(
                    ("slurm", flat),
                    f"slurm.{flat} and slurm.container.{key} are both set",
                    f"keep slurm.container.{key} only",
                    key=True,
                )
        runtime = box.get("runtime", "pyxis")
        img_path: JsonPath = (*base, "image") if "image" in box else ("slurm", "container_image")
        img = box.get("image", s.get("container_image"))
        if runtime == "apptainer":
            if isinstance(img, str) and img and not (_sif_ok(img) or _DOCKER_URI.fullmatch(img)):
                self.err(
                    img_path,
                    f"{_short(img)} is not an Apptainer image (an absolute path to a .sif file, or "
                    "docker://IMAGE[:TAG]; no spaces or shell metacharacters)",
                )
            for key in ("env", "name"):
                if box.get(key):
                    self.err(
                        (*base, key),
                        f"slurm.container.{key} is a pyxis option; apptainer "
                        + (
                            "passes the job's environment into the container itself"
                            if key == "env"
                            else "starts each task's container from the image"
                        ),
                        key=True,
                    )
        elif (
            isinstance(img, str)
            and img
            and not (_IMAGE_REF.fullmatch(img) or _PYXIS_IMAGE.fullmatch(img) or _sqsh_ok(img))
        ):
            self.err(
                img_path,
                f"{_short(img)} is not an image reference ([REGISTRY#]IMAGE"
                "[:TAG], e.g. nvcr.io#nvidia/pytorch:24.08-py3) or an absolute path to a squashfs file "
                "(.sqsh, .sqfs, .squashfs; no spaces, commas or shell metacharacters)",
            )
        name = box.get("name")
        if isinstance(name, str) and name and not _SLURM_WORD.fullmatch(name):
            self.err(
                (*base, "name"),
                f"{_short(name)} is not a container name (letters, digits, '_', '.', '-', not "
                "starting with '-')",
            )
        env = box.get("env")
        if isinstance(env, list):
            for i, n in enumerate(env):
                if isinstance(n, str) and not _ENV_NAME.fullmatch(n):
                    self.err(
                        (*base, "env", i),
                        f"{_short(n)} is not a variable name (letters, digits, '_', not "
                        "starting with a digit)",
                    )
        mounts_path: JsonPath = (
            (*base, "mounts") if "mounts" in box else ("slurm", "container_mounts")
        )
        mounts = box.get("mounts", s.get("container_mounts"))
        if not isinstance(mounts, list):
            return
        shared = s.get("shared_dir")
        for i, m in enumerate(mounts):
            if not isinstance(m, str):
                continue
            if runtime == "apptainer" and not _apptainer_mount_ok(m):
                self.err(
                    (*mounts_path, i),
                    f"{_short(m)} is not an Apptainer bind 'SRC[:DST[:ro|rw]]' of absolute paths "
                    "(no spaces or shell metacharacters)",
                )
            elif runtime != "apptainer" and not mount_ok(m):
                self.err(
                    (*mounts_path, i),
                    f"{_short(m)} is not a mount 'SRC[:DST[:FLAGS]]' "
                    "of absolute paths (FLAGS: "
                    + ", ".join(sorted(MOUNT_FLAGS))
                    + ", joined by '+' or ','; no spaces or shell metacharacters)",
                )
            elif isinstance(shared, str) and _abs_path_ok(shared):
                parts = m.split(":")
                dst = parts[1] if len(parts) > 1 else parts[0]
                if _covers(dst, shared):
                    self.err(
                        (*mounts_path, i),
                        f"{_short(m)} mounts onto {dst}, which would hide slurm.shared_dir "
                        f"{shared} in the container (the job's scripts, venv and reports)",
                        "mount it elsewhere, e.g. under /mnt",
                    )

    def job_env(self, s: dict[str, Any]) -> None:
        """``slurm.env``: the schema allows the names (FI_*, GLOO_SOCKET_IFNAME); here each
        value's grammar (interface names; libfabric's plain words)."""
        env = s.get("env")
        if not isinstance(env, dict):
            return
        for name, v in env.items():
            if not isinstance(name, str) or isinstance(v, bool) or not isinstance(v, (str, int)):
                continue
            text = str(v)
            path: JsonPath = ("slurm", "env", name)
            if name == "GLOO_SOCKET_IFNAME":
                if not all(_IFNAME.match(p) for p in text.split(",")):
                    self.err(
                        path,
                        f"{_short(text)} is not a list of interface names (comma-separated, "
                        "at most 15 characters each, no spaces or '/')",
                    )
            elif not _FI_VALUE.fullmatch(text):
                self.err(
                    path,
                    f"{_short(text)} is not a plain libfabric value (letters, digits, '_', '.', "
                    "',', '/', '+', '=', '-', not starting with '-'; at most 256 characters)",
                )

    def sbatch_args(self, s: dict[str, Any]) -> None:
        """``slurm.sbatch_args``: allow-listed long options with plain values (argv.sbatch_option);
        ``--gres`` only when ``gpus_flag: none`` (else two GPU requests would disagree)."""
        args = s.get("sbatch_args")
        if not isinstance(args, list):
            return
        seen: set[str] = set()
        for i, a in enumerate(args):
            if not isinstance(a, str):
                continue
            path: JsonPath = ("slurm", "sbatch_args", i)
            try:
                argv.sbatch_option(a)
            except argv.UnsafeArgument as e:
                self.err(path, str(e))
                continue
            opt = a[2:].partition("=")[0]
            if opt in seen:
                self.err(path, f"--{opt} is given twice")
            seen.add(opt)
            box = s.get("container")
            image = s.get("container_image") or (box.get("image") if isinstance(box, dict) else "")
            if opt in ("environment", "uenv") and image:
                self.err(
                    path,
                    f"--{opt} and slurm.container both give the job its software: the "
                    "tasks would start in one inside the other",
                    "keep one of them",
                )
            if opt == "gres" and s.get("gpus_flag", "gpus-per-node") != "none":
                self.err(
                    path,
                    "--gres here and GPUs requested by slurm.gpus_flag would be two requests",
                    "set 'gpus_flag: none' to write the whole --gres yourself",
                )

    def hosts(self, active: bool) -> None:
        h = _get(self.data, "hosts")
        h = h if isinstance(h, dict) else {}
        base: JsonPath = ("hosts",)
        nodes = _get(self.data, "nodes", "gpu_nodes")
        if active and not (isinstance(nodes, list) and nodes):
            self.err(
                ("nodes", "gpu_nodes")
                if isinstance(_get(self.data, "nodes"), dict)
                else ("platform",),
                "platform: hosts needs the hosts listed in nodes.gpu_nodes (host 0 is the head)",
            )
        user = h.get("ssh_user")
        if isinstance(user, str) and user and not _USER.fullmatch(user):
            self.err(
                (*base, "ssh_user"),
                f"{_short(user)} is not a user name (lower-case letters, digits, "
                "'_', '-', not starting with '-')",
            )
        key = h.get("ssh_key")
        if isinstance(key, str) and key and not _KEY_PATH.fullmatch(key):
            self.err(
                (*base, "ssh_key"),
                f"{_short(key)} is not an absolute or ~/ path (letters, digits, "
                "'_', '.', '/', '+', '-'; no spaces or shell metacharacters)",
            )
        self._abs_path((*base, "shared_dir"), h.get("shared_dir"))
        self._python((*base, "python"), h.get("python"))

    def _abs_path(self, path: JsonPath, v: Any) -> None:
        if isinstance(v, str) and v and not _abs_path_ok(v):
            self.err(
                path,
                f"{_short(v)} is not an absolute path (letters, digits, '_', '.', '/', '+', '-'; "
                "no '..', spaces or shell metacharacters)",
            )

    def _python(self, path: JsonPath, v: Any) -> None:
        if isinstance(v, str) and not (_COMMAND.fullmatch(v) or _abs_path_ok(v)):
            self.err(
                path,
                f"{_short(v)} is not a command name (python3) or an absolute path to an "
                "interpreter (no spaces, options or shell metacharacters)",
            )

    def quoted_integers(self) -> None:
        """The range of every quoted integer (``cross_nic: "1"``, as upstream ml-dev-env
        writes every NCCL knob). The schema accepts ASCII digit strings for each integer
        key and checks numbers' ranges; other strings are its pattern error."""
        for path, lo, hi in _INT_KNOBS:
            for where, v in _resolve(self.data, path):
                if not (isinstance(v, str) and _DIGITS.fullmatch(v)):
                    continue
                want = f"from {lo} to {hi}" if hi is not None else f"of at least {lo}"
                digits = v.lstrip("0") or "0"
                if len(digits) > 6:  # never int() an arbitrarily long string
                    self.err(where, f"expected an integer {want}, got a string of {len(v)} digits")
                elif (lo is not None and int(digits) < lo) or (hi is not None and int(digits) > hi):
                    self.err(where, f"expected an integer {want}, got string {v!r}")

    def service_account(self) -> None:
        """the namespace's built-in service accounts are shared by every pod there:
        labelling, granting an SCC to or deleting one of them affects the neighbours."""
        sa = _get(self.data, "security", "service_account")
        if isinstance(sa, str) and sa in BUILTIN_SERVICE_ACCOUNTS:
            self.err(
                ("security", "service_account"),
                f"{sa!r} is a built-in service account of every namespace; mlenv labels, "
                "grants an SCC to and on teardown deletes its service account, which would "
                "affect every pod that runs as it",
                "use a dedicated one, e.g. 'ml-dev-sa' (the default)",
            )

    def image(self) -> None:
        """image refs and build sources reach the registry, git and BuildConfigs."""
        ref = _get(self.data, "image", "ref")
        if isinstance(ref, str) and ref and not _IMAGE_REF.fullmatch(ref):
            self.err(
                ("image", "ref"),
                f"{_short(ref)} is not an image reference "
                "(registry/name[:tag][@sha256:digest], no spaces or control characters)",
            )
        uri = _get(self.data, "image", "build", "git_uri")
        if isinstance(uri, str) and uri and not _GIT_URI.fullmatch(uri):
            self.err(
                ("image", "build", "git_uri"),
                f"{_short(uri)} is not an https://, ssh:// or git@host:path repository URL",
                "other transports (ext::, file://, a path, an option) can run commands or read "
                "the builder's files",
            )
        ref_ = _get(self.data, "image", "build", "git_ref")
        if isinstance(ref_, str) and ref_ and not _git_ref_ok(ref_):
            self.err(
                ("image", "build", "git_ref"),
                f"{_short(ref_)} is not a git branch, tag or commit name (letters, digits "
                "and ._/+-, not starting with '-', no '..')",
            )
        path = _get(self.data, "image", "build", "dockerfile_path")
        if isinstance(path, str) and path and not _dockerfile_ok(path):
            self.err(
                ("image", "build", "dockerfile_path"),
                f"{_short(path)} is not a relative path inside the repository (no leading "
                "'/', no '..' segment, no control characters)",
            )

    def free_text(self) -> None:
        """the free-text fields reach a terminal (``list-clusters``, deploy's
        output) and rendered annotations. Text is fine; a control character (an ANSI escape
        that rewrites the screen, a NUL, a carriage return) or a bidi override that makes
        the text read differently from what it is, is not. ``notes`` may span lines."""
        api = _get(self.data, "cluster", "api")
        if isinstance(api, str) and api and not _API.fullmatch(api):
            self.err(
                ("cluster", "api"),
                f"{_short(api)} is not an API server host or URL "
                "(host[:port] or https://host[:port], no spaces or control characters)",
            )
        for path, multiline in (
            (("cluster", "description"), False),
            (("gpus", "type"), False),
            (("notes",), True),
        ):
            v = _get(self.data, *path)
            if not isinstance(v, str):
                continue
            bad = (_TEXT_UNSAFE_ML if multiline else _TEXT_UNSAFE).search(v)
            if bad:
                self.err(
                    path,
                    f"text contains {_char(bad.group(0))}; free text may not carry "
                    "control characters or bidi overrides"
                    + ("" if multiline else ", and is one line"),
                )

    def resources(self) -> None:
        got: dict[str, dict[str, Decimal | None]] = {}
        for kind in ("requests", "limits"):
            got[kind] = {r: self.quantity(("resources", kind, r)) for r in ("cpu", "memory")}
        for r in ("cpu", "memory"):
            req, lim = got["requests"][r], got["limits"][r]
            if req is not None and lim is not None and req > lim:
                self.err(
                    ("resources", "requests", r),
                    f"request {_get(self.data, 'resources', 'requests', r)!r} is above the limit {_get(self.data, 'resources', 'limits', r)!r}",
                )

    def rdma(self) -> None:
        rdma = _get(self.data, "network", "rdma")
        if not isinstance(rdma, dict):
            return
        base: JsonPath = ("network", "rdma")
        raw_devices = rdma.get("devices", [])
        auto = isinstance(raw_devices, str) and raw_devices.strip() == "auto"
        devices = [] if auto else split_list(raw_devices)
        interfaces = split_list(rdma.get("interfaces", []))
        if devices is not None:
            if self.off_k8s:
                # NCCL_IB_HCA's '=' (exact names: mlx5_1 without mlx5_10-17) and '^'
                # (exclude) prefixes: read once, before the whole list
                devices = self._hca_prefix((*base, "devices"), raw_devices, devices)
                self._names(
                    (*base, "devices"),
                    raw_devices,
                    devices,
                    _HCA_PORT,
                    "device",
                    "an HCA name like mlx5_6, or device:port like mlx5_0:1",
                )
            else:
                self._names(
                    (*base, "devices"),
                    raw_devices,
                    devices,
                    _HCA,
                    "device",
                    "an HCA name like mlx5_6",
                )
        if interfaces is not None:
            self._names(
                (*base, "interfaces"),
                rdma.get("interfaces"),
                interfaces,
                _IFNAME,
                "interface",
                "at most 15 characters, no spaces or '/'",
            )
        nets = rdma.get("networks")
        if isinstance(nets, list):
            for i, n in enumerate(nets):
                if isinstance(n, str):
                    parts = n.split("/")
                    if len(parts) > 2 or not all(_LABEL.match(p) and len(p) <= 63 for p in parts):
                        self.err(
                            (*base, "networks", i),
                            f"network {n!r} is not a NetworkAttachmentDefinition name ('name' or 'namespace/name', DNS-1123 labels)",
                            _fix_hint(n),
                        )
        res = rdma.get("resources")
        if isinstance(res, dict):
            for key in res:
                if key in ("nvidia.com/gpu", "amd.com/gpu") or key.endswith("/gpu"):
                    self.err(
                        (*base, "resources", key),
                        f"{key} is the GPU resource: set gpus.per_node instead (here it would "
                        "silently override it)",
                        key=True,
                    )
        if rdma.get("enabled") is not True:
            return
        if not rdma.get("resources") and not rdma.get("networks") and not self.off_k8s:
            # Valid (host networking, devices exposed some other way) but usually a mistake:
            # the pods would get neither an RDMA device nor a Multus attachment.
            self.warn(
                (*base, "enabled"),
                "RDMA is enabled but neither network.rdma.resources nor network.rdma.networks is set, "
                "so the pods request no RDMA device and no Multus network",
                "add the device-plugin resource, e.g. 'rdma/rdma_shared_device_a: 1', "
                "and the NetworkAttachmentDefinition names",
            )
        if devices is not None and not auto and not devices:
            self.err(
                (*base, "devices") if "devices" in rdma else base,
                "RDMA is enabled but no devices are listed",
                "list the HCAs (e.g. mlx5_6,mlx5_7) or write 'devices: auto'",
                key="devices" not in rdma,
            )
        elif (
            devices
            and interfaces is not None
            and len(interfaces) != len(devices)
            and not self.off_k8s
        ):
            # On Kubernetes each device has its pod interface (Multus); on slurm/hosts the
            # interfaces are the hosts' bootstrap ones, optional and not paired with devices.
            self.err(
                (*base, "interfaces") if "interfaces" in rdma else base,
                f"{len(interfaces)} interface(s) for {len(devices)} RDMA device(s); list one interface per device, in the same order",
                _upstream_discovered_hint(interfaces, devices),
                key="interfaces" not in rdma,
            )

    def _hca_prefix(self, path: JsonPath, raw: Any, devices: list[str]) -> list[str]:
        """``devices`` without NCCL's leading ``^``/``=``/``^=`` (first entry only; a prefix on
        a later entry is an error, as NCCL would take it for part of a name)."""
        out = list(devices)
        if out and out[0][:1] in ("^", "="):
            out[0] = out[0][2:] if out[0].startswith("^=") else out[0][1:]
        for i, d in enumerate(out):
            if d[:1] in ("^", "="):
                self.err(
                    (*path, i) if isinstance(raw, list) else path,
                    f"device {d!r}: NCCL reads '^' (exclude) and '=' (exact names) only before "
                    "the first device, for the whole list",
                    "write e.g. '=mlx5_1,mlx5_2' or '^mlx5_bond_0'",
                )
                out[i] = d.lstrip("^=")
        return out

    def _names(
        self,
        path: JsonPath,
        raw: Any,
        names: list[str],
        rx: re.Pattern[str],
        what: str,
        expected: str,
    ) -> None:
        seen: set[str] = set()
        for i, n in enumerate(names):
            p = (*path, i) if isinstance(raw, list) else path
            if not rx.match(n):
                self.err(p, f"{what} name {n!r} is not valid ({expected})")
            elif n in seen:
                self.err(p, f"{what} {n!r} is listed twice")
            seen.add(n)

    def tcp(self) -> None:
        raw = _get(self.data, "network", "tcp", "interface_exclude")
        names = split_list(raw)
        if names is None:
            return
        if isinstance(raw, str) and names and names[0].startswith("^"):
            names[0] = names[0][1:]  # legacy "^lo,docker0": NCCL's exclusion prefix
        self._names(
            ("network", "tcp", "interface_exclude"),
            raw,
            names,
            _IFNAME,
            "interface",
            "at most 15 characters, no spaces or '/'",
        )

    def gpus(self) -> None:
        count = self.node_count()
        default = _as_int(_get(self.data, "gpus", "default_nodes"))
        if default is not None and default > MAX_NODES:
            self.err(("gpus", "default_nodes"), f"{default} is more than {MAX_NODES} nodes")
            return
        if count and default is not None:
            if default > count:
                self.err(
                    ("gpus", "default_nodes"),
                    f"default_nodes is {default} but nodes.gpu_nodes lists only {count} node(s); one pod runs per node",
                )

    def nccl_env(self) -> None:
        env = _get(self.data, "nccl", "env")
        if not isinstance(env, dict):
            return
        for name, value in env.items():
            before = len(self.out)
            # the pod refuses these (mlenv/pod/dsenv.py) and would crash-loop in init:
            # the DeepSpeed launcher writes each value into a double-quoted shell export.
            if isinstance(value, str):
                bad = _ENV_UNSAFE.search(value)
                if bad:
                    self.err(
                        ("nccl", "env", name),
                        f"value contains {_char(bad.group(0))}, which cannot reach remote "
                        'ranks intact (the launcher writes KEY="value" shell exports); '
                        "pods would fail in 'pod init'",
                    )
                elif value != value.strip():
                    self.err(
                        ("nccl", "env", name),
                        "value has leading or trailing whitespace, which the launcher strips",
                    )
            if name == "NCCL_SOCKET_IFNAME" and self.off_k8s:
                # Off Kubernetes nothing else knows the bootstrap interface (bond0, ib0).
                bad_if = [
                    n
                    for n in (value.lstrip("^=").split(",") if isinstance(value, str) else [])
                    if not _IFNAME.match(n)
                ]
                if (bad_if or not isinstance(value, str) or not value) and len(self.out) == before:
                    self.err(
                        ("nccl", "env", name),
                        "NCCL_SOCKET_IFNAME is interface names ('bond0', "
                        "'ib0,ib1', '^lo,docker0' or '=eth0'), at most 15 characters each",
                    )
                continue
            if name in RESERVED_NCCL:
                self.err(
                    ("nccl", "env", name),
                    f"{name} is set from {RESERVED_NCCL[name]}; set it there instead",
                    key=True,
                )


BUILTIN_SERVICE_ACCOUNTS = ("default", "builder", "deployer", "pipeline")
# An image reference as the OCI distribution grammar has it: [domain[:port]/]name
# components[:tag][@sha256:digest]. No whitespace, control characters or leading '-'.
_NAME_COMP = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*(?::[0-9]+)?"
_IMAGE_REF = re.compile(
    rf"(?:{_DOMAIN}/)?{_NAME_COMP}(?:/{_NAME_COMP})*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[a-f0-9]{64})?"
)
_GIT_URI = re.compile(
    r"(https://[A-Za-z0-9.-]+(:[0-9]+)?/[A-Za-z0-9._~%/+-]+"
    r"|ssh://([A-Za-z0-9._-]+@)?[A-Za-z0-9.-]+(:[0-9]+)?/[A-Za-z0-9._~%/+-]+"
    r"|[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:[A-Za-z0-9._~/+-]+)"
)
_ENV_UNSAFE = re.compile(r"[\x00-\x1f\x7f\"'$`\\]")
# C0/C1 controls, DEL and the bidi embedding/override/isolate characters (U+202A-202E,
# U+2066-2069): what makes text on a terminal or in a review differ from its bytes.
_TEXT_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_TEXT_UNSAFE_ML = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_API = re.compile(rf"(?:https://)?{_DOMAIN}/?")
# Pyxis/enroot's own form [REGISTRY#]IMAGE[:TAG]: `nvcr.io#nvidia/pytorch:24.08-py3` (without
# '#' enroot takes the first component for a Docker Hub path).
_PYXIS_IMAGE = re.compile(
    rf"{_DOMAIN}#{_NAME_COMP}(?:/{_NAME_COMP})*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[a-f0-9]{64})?"
)


# Keys only the Kubernetes/OpenShift renderer reads, and what they are.
_K8S_ONLY = {
    "storage": "the pods' volumes",
    "security": "the pods' service account and SCC",
    "dev_tools": "the dev tools' Routes",
    "scheduling": "the pods' tolerations and node selector",
    "resources": "the containers' requests and limits",
    "shm_size": "the pods' /dev/shm size",
    "ssh_port": "the pods' launcher sshd port",
}
_SLURM_WORD = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
_SLURM_ACCOUNT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.@-]{0,63}")
# A host name's tail: "i" (JSC: jwb0001i), "-ib", ".ib.cluster".
_ADDR_SUFFIX = re.compile(r"[A-Za-z0-9.-]{1,63}")
# Lmod/Tcl module names: Stages/2024, PyTorch/2.1.2-foss-2023a-CUDA-12.1.1, cray-python.
_MODULE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*(/[A-Za-z0-9_][A-Za-z0-9_.+-]*)*")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
# libfabric variables' values: 1, userfaultfd, cxi, 131072, a path (FI_PROVIDER_PATH);
# not a layered provider's 'tcp;ofi_rxm' (no ';': the value stays free of shell syntax)
_FI_VALUE = re.compile(r"[A-Za-z0-9_.,/+=][A-Za-z0-9_.,/+=-]{0,255}")
_DOCKER_URI = re.compile(
    rf"docker://{_DOMAIN}/?{_NAME_COMP}(?:/{_NAME_COMP})*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[a-f0-9]{64})?"
)
_COMMAND = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,63}")
_USER = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
_PATH_CHARS = r"[A-Za-z0-9_./+-]*"
_KEY_PATH = re.compile(r"(/|~/)" + _PATH_CHARS)
_SLURM_TIME = re.compile(
    r"(?:(?P<d>[0-9]{1,4})-(?P<dh>[0-9]{1,2})(?::(?P<dm>[0-9]{1,2})(?::(?P<ds>[0-9]{1,2}))?)?"
    r"|(?P<h>[0-9]{1,3}):(?P<hm>[0-9]{1,2}):(?P<hs>[0-9]{1,2})"
    r"|(?P<m>[0-9]{1,6})(?::(?P<ms>[0-9]{1,2}))?)"
)


def slurm_minutes(text: str) -> float | None:
    """A Slurm ``--time`` value in minutes (``UNLIMITED``/``INFINITE`` → inf), or None if it is
    not one. Forms as sbatch(1) lists them: minutes, minutes:seconds, hours:minutes:seconds,
    days-hours, days-hours:minutes, days-hours:minutes:seconds."""
    if text in ("UNLIMITED", "INFINITE", "unlimited", "infinite"):
        return float("inf")
    m = _SLURM_TIME.fullmatch(text)
    if not m:
        return None
    g = {k: int(v) for k, v in m.groupdict().items() if v is not None}
    if any(g.get(k, 0) > 59 for k in ("dm", "ds", "hm", "hs", "ms")) or g.get("dh", 0) > 23:
        return None
    if "d" in g:
        return g["d"] * 1440 + g["dh"] * 60 + g.get("dm", 0) + g.get("ds", 0) / 60
    if "h" in g:
        return g["h"] * 60 + g["hm"] + g["hs"] / 60
    return g["m"] + g.get("ms", 0) / 60


def _abs_path_ok(v: str) -> bool:
    return (
        v.startswith("/")
        and re.fullmatch(_PATH_CHARS, v) is not None
        and ".." not in v.split("/")
        and len(v) <= 1024
    )


def _sif_ok(v: str) -> bool:
    return _abs_path_ok(v) and v.endswith(".sif")


def _apptainer_mount_ok(v: str) -> bool:
    """An Apptainer ``--bind`` entry ``SRC[:DST[:ro|rw]]`` of absolute paths."""
    parts = v.split(":")
    if len(parts) == 3:
        if parts[2] not in ("ro", "rw"):
            return False
        parts = parts[:2]
    return len(parts) in (1, 2) and all(_abs_path_ok(p) for p in parts)


def _covers(dst: str, shared: str) -> bool:
    """Whether a mount onto ``dst`` hides ``shared`` (the same folder or one above it)."""
    d = [p for p in dst.split("/") if p]
    return d == [p for p in shared.split("/") if p][: len(d)]


def _sqsh_ok(v: str) -> bool:
    return _abs_path_ok(v) and v.endswith((".sqsh", ".sqfs", ".squashfs"))


# enroot/pyxis mount flags (enroot's fstab options that a bind mount takes).
MOUNT_FLAGS = frozenset(
    {
        "ro",
        "rw",
        "bind",
        "rbind",
        "private",
        "rprivate",
        "slave",
        "rslave",
        "shared",
        "rshared",
        "nosuid",
        "nodev",
        "noexec",
        "x-create=dir",
        "x-create=file",
        "x-create=auto",
    }
)


def mount_flags(flags: str) -> list[str] | None:
    """``ro+rbind`` or ``ro,rbind`` → ``[ro, rbind]``; None unless every flag is allowed."""
    parts = re.split(r"[+,]", flags)
    return parts if parts and all(p in MOUNT_FLAGS for p in parts) else None


def mount_ok(v: str) -> bool:
    """A pyxis mount ``SRC[:DST[:FLAGS]]`` of absolute paths and allowed flags."""
    parts = v.split(":")
    if len(parts) == 3:
        if mount_flags(parts[2]) is None:
            return False
        parts = parts[:2]
    return len(parts) in (1, 2) and all(_abs_path_ok(p) for p in parts)


def _char(c: str) -> str:
    return {"\n": "a newline", "\r": "a carriage return", "\t": "a tab"}.get(
        c,
        repr(c)
        if c.isprintable()
        else f"control character {ord(c):#04x}"
        if ord(c) < 0x100
        else f"the invisible formatting character U+{ord(c):04X}",
    )


def _short(v: str) -> str:
    return repr(v) if len(v) <= 60 else repr(v[:57] + "...")


def _git_ref_ok(ref: str) -> bool:
    """A branch, tag or commit: git check-ref-format's rules, restricted to the characters
    real refs use (a ref reaches the BuildConfig and git on the builder), no leading '-'."""
    return (
        re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9._/+-]*", ref) is not None
        and not ref.endswith((".", "/", ".lock"))
        and ".." not in ref
        and "//" not in ref
        and len(ref) <= 255
    )


def _dockerfile_ok(path: str) -> bool:
    """A relative path inside the build context, in the characters real paths use."""
    return (
        re.fullmatch(r"[A-Za-z0-9_.][A-Za-z0-9._/+-]*", path) is not None
        and ".." not in path.split("/")
        and len(path) <= 1024
    )


def _int_knobs() -> list[tuple[tuple[str, ...], int | None, int | None]]:
    """(path, minimum, maximum) of every integer key in the schema ('*' = any map key)."""
    from mlenv.config.schema import schema

    out: list[tuple[tuple[str, ...], int | None, int | None]] = []

    def walk(node: Any, path: tuple[str, ...]) -> None:
        if not isinstance(node, dict):
            return
        t = node.get("type")
        if t == "integer" or (isinstance(t, list) and "integer" in t):
            out.append((path, node.get("minimum"), node.get("maximum")))
        for k, v in (node.get("properties") or {}).items():
            walk(v, (*path, k))
        if isinstance(node.get("additionalProperties"), dict):
            walk(node["additionalProperties"], (*path, "*"))

    walk(schema(), ())
    return out


_INT_KNOBS = _int_knobs()


def _resolve(data: Any, path: tuple[str, ...]) -> list[tuple[JsonPath, Any]]:
    """The (location, value) pairs at ``path`` in ``data``; '*' walks every key of a map."""
    found: list[tuple[JsonPath, Any]] = [((), data)]
    for part in path:
        nxt: list[tuple[JsonPath, Any]] = []
        for where, node in found:
            if not isinstance(node, dict):
                continue
            keys = list(node) if part == "*" else [part] if part in node else []
            nxt.extend(((*where, k), node[k]) for k in keys)
        found = nxt
    return found


def _as_int(v: Any) -> int | None:
    """An int or an ASCII digit string (at most 6 digits) as int; None otherwise."""
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    if isinstance(v, str) and _DIGITS.fullmatch(v) and len(v) <= 6:
        return int(v)
    return None


def _fix_hint(value: str) -> str:
    fixed = re.sub(r"[^a-z0-9.-]+", "-", value.lower()).strip("-.")
    return f"did you mean '{fixed}'?" if fixed and fixed != value else ""


def _quantity_hint(value: str) -> str:
    m = re.match(r"^\s*([0-9.]+)\s*([KMGTPE])i?B\s*$", value, re.IGNORECASE)
    if m:
        return f"did you mean '{m.group(1)}{m.group(2).upper()}i'?"
    m = re.match(r"^\s*([0-9.]+)\s+(\S+)\s*$", value)
    if m and parse_quantity(m.group(1) + m.group(2)) is not None:
        return f"did you mean '{m.group(1)}{m.group(2)}', without the space?"
    if value != value.strip() and parse_quantity(value.strip()) is not None:
        return f"did you mean '{value.strip()}', without the surrounding spaces?"
    return ""


def semantic_diagnostics(parsed: Parsed, file: str) -> list[Diagnostic]:
    """Every semantic-rule violation in ``parsed.data`` (see module docstring)."""
    return _Rules(parsed, file).run()


CRON_FIELDS = (
    ("minute", 0, 59),
    ("hour", 0, 23),
    ("day of month", 1, 31),
    ("month", 1, 12),
    ("day of week", 0, 7),
)


def cron_problem(schedule: str) -> str:
    """Why a five-field numeric cron ``schedule`` is out of range ("" when it is fine).

    The schema admits only digits, ``*``, ``,``, ``-`` and ``/`` in five fields; this
    checks what a pattern cannot: each number in its field's range, ``a-b`` with a <= b,
    a step of at least 1. Kubernetes, scrontab and cron would each refuse or misread
    what fails here, and later than ``validate`` does (at apply, at scrontab, never).
    """
    fields = schedule.split(" ")
    if len(fields) != 5:
        return (
            f"expected five fields (minute hour day-of-month month day-of-week), got {len(fields)}"
        )
    for text, (what, lo, hi) in zip(fields, CRON_FIELDS, strict=True):
        try:
            cron_field(text, what, lo, hi)
        except ValueError as e:
            return str(e)
    return ""


def cron_field(text: str, what: str, lo: int, hi: int) -> tuple[int, ...]:
    """The numbers one cron field names, ascending; ValueError saying why when it is not a
    field of ``what`` (``lo``-``hi``). The one reading of the grammar: ``validate`` checks
    with it (:func:`cron_problem`) and ``mlenv render`` expands with it
    (:mod:`mlenv.render.cron`), so the two cannot disagree."""
    out: set[int] = set()
    for item in text.split(","):
        base, _, step = item.partition("/")
        if step and (not step.isdigit() or int(step) < 1):
            raise ValueError(f"{what} {item!r}: the step after '/' must be a number of at least 1")
        if base == "*":
            first, last = lo, hi
        else:
            a, dash, b = base.partition("-")
            if not a.isdigit() or (dash and not b.isdigit()):
                raise ValueError(f"{what} {item!r}: expected '*', a number or a range a-b")
            first, last = int(a), int(b) if dash else int(a)
            if not (lo <= first <= hi and lo <= last <= hi):
                raise ValueError(f"{what} {item!r} is outside {lo}-{hi}")
            if first > last:
                raise ValueError(f"{what} {item!r}: the range runs backwards")
            if step and not dash:
                last = hi  # "a/s" runs from a to the field's end (vixie cron and Kubernetes alike)
        out.update(range(first, last + 1, int(step) if step else 1))
    return tuple(sorted(out))
