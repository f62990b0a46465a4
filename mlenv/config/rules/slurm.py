"""``slurm:``: every value reaches a batch script or sbatch's command line, so each is
checked here in Slurm's grammar (and quoted there); the container's image and mounts in its
runtime's grammar."""

from __future__ import annotations

import re
from typing import Any

from mlenv import argv
from mlenv.config.rules.common import (
    _DOMAIN,
    _IFNAME,
    _IMAGE_REF,
    _NAME_COMP,
    Checker,
    _abs_path,
    _abs_path_ok,
    _get,
    _python,
    _short,
)
from mlenv.config.yamlpos import JsonPath

# Pyxis/enroot's own form [REGISTRY#]IMAGE[:TAG]: `nvcr.io#nvidia/pytorch:24.08-py3` (without
# '#' enroot takes the first component for a Docker Hub path).
_PYXIS_IMAGE = re.compile(
    rf"{_DOMAIN}#{_NAME_COMP}(?:/{_NAME_COMP})*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[a-f0-9]{64})?"
)
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
_SLURM_TIME = re.compile(
    r"(?:(?P<d>[0-9]{1,4})-(?P<dh>[0-9]{1,2})(?::(?P<dm>[0-9]{1,2})(?::(?P<ds>[0-9]{1,2}))?)?"
    r"|(?P<h>[0-9]{1,3}):(?P<hm>[0-9]{1,2}):(?P<hs>[0-9]{1,2})"
    r"|(?P<m>[0-9]{1,6})(?::(?P<ms>[0-9]{1,2}))?)"
)


def check(c: Checker, active: bool) -> None:
    s = _get(c.data, "slurm")
    s = s if isinstance(s, dict) else {}
    base: JsonPath = ("slurm",)
    # No partition is a site's choice (MareNostrum 5, Perlmutter: -q/-C/-A pick the
    # nodes); shared_dir is where the job's files live, so it stays required.
    if active and not s.get("shared_dir"):
        c.err(
            (*base, "shared_dir")
            if "shared_dir" in s
            else ((*base,) if "slurm" in c.data else ("platform",)),
            "slurm.shared_dir is required on platform: slurm",
            "a filesystem every node sees, e.g. /shared/mlenv",
            key="shared_dir" not in s,
        )
    acct = s.get("account")
    if isinstance(acct, str) and acct and not _SLURM_ACCOUNT.fullmatch(acct):
        c.err(
            (*base, "account"),
            f"{_short(acct)} is not a Slurm account name (letters, digits, '_', '.', '@', "
            "'-', not starting with '-' or '@', at most 64 characters)",
        )
    for key in ("partition", "qos", "reservation", "gpu_type"):
        v = s.get(key)
        # partition and reservation take comma lists (sbatch: the first that can start it)
        words = v.split(",") if isinstance(v, str) and key in ("partition", "reservation") else [v]
        if (
            isinstance(v, str)
            and v
            and not all(isinstance(w, str) and _SLURM_WORD.fullmatch(w) for w in words)
        ):
            c.err(
                (*base, key),
                f"{_short(v)} is not a plain Slurm name (letters, digits, '_', '.', "
                "'-', not starting with '-', at most 64 characters"
                + (", or a comma list of them)" if key in ("partition", "reservation") else ")"),
            )
    v = s.get("constraint")
    if isinstance(v, str) and v:
        try:
            argv.slurm_constraint(v)
        except argv.UnsafeArgument as e:
            c.err((*base, "constraint"), str(e))
    sbatch_args(c, s)
    tl = s.get("time_limit")
    if isinstance(tl, str):
        minutes = slurm_minutes(tl)
        if minutes is None:
            c.err(
                (*base, "time_limit"),
                f"{_short(tl)} is not a Slurm time (minutes, MM:SS, HH:MM:SS, "
                "D-HH, D-HH:MM or D-HH:MM:SS)",
            )
        elif minutes <= 0:
            c.err((*base, "time_limit"), f"{_short(tl)} is zero: the job could not run")
    _abs_path(c, (*base, "shared_dir"), s.get("shared_dir"))
    _python(c, (*base, "python"), s.get("python"))
    container(c, s)
    job_env(c, s)
    suffix = s.get("master_addr_suffix")
    if isinstance(suffix, str) and suffix and not _ADDR_SUFFIX.fullmatch(suffix):
        c.err(
            (*base, "master_addr_suffix"),
            f"{_short(suffix)} is not a host name suffix (letters, digits, '.', '-', at most "
            "63 characters; e.g. 'i' for JUWELS' InfiniBand names)",
        )
    mods = s.get("modules")
    if isinstance(mods, list):
        for i, m in enumerate(mods):
            if isinstance(m, str) and not _MODULE.fullmatch(m):
                c.err(
                    (*base, "modules", i),
                    f"{_short(m)} is not a module name (letters, digits, '_', '.', '+', '-', "
                    "'/' between parts, e.g. Stages/2024 or PyTorch/2.1.2-foss-2023a; no "
                    "spaces, options or shell metacharacters)",
                )


def container(c: Checker, s: dict[str, Any]) -> None:
    """``slurm.container`` (or the flat ``container_image``/``container_mounts``): the
    image and mounts in its runtime's grammar; the pyxis-only keys on pyxis; no mount that
    would hide ``shared_dir``."""
    box = s.get("container")
    box = box if isinstance(box, dict) else {}
    base: JsonPath = ("slurm", "container")
    for flat, key in (("container_image", "image"), ("container_mounts", "mounts")):
        if flat in s and key in box:
            c.err(
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
            c.err(
                img_path,
                f"{_short(img)} is not an Apptainer image (an absolute path to a .sif file, or "
                "docker://IMAGE[:TAG]; no spaces or shell metacharacters)",
            )
        for key in ("env", "name"):
            if box.get(key):
                c.err(
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
        c.err(
            img_path,
            f"{_short(img)} is not an image reference ([REGISTRY#]IMAGE"
            "[:TAG], e.g. nvcr.io#nvidia/pytorch:24.08-py3) or an absolute path to a squashfs file "
            "(.sqsh, .sqfs, .squashfs; no spaces, commas or shell metacharacters)",
        )
    name = box.get("name")
    if isinstance(name, str) and name and not _SLURM_WORD.fullmatch(name):
        c.err(
            (*base, "name"),
            f"{_short(name)} is not a container name (letters, digits, '_', '.', '-', not "
            "starting with '-')",
        )
    env = box.get("env")
    if isinstance(env, list):
        for i, n in enumerate(env):
            if isinstance(n, str) and not _ENV_NAME.fullmatch(n):
                c.err(
                    (*base, "env", i),
                    f"{_short(n)} is not a variable name (letters, digits, '_', not "
                    "starting with a digit)",
                )
    mounts_path: JsonPath = (*base, "mounts") if "mounts" in box else ("slurm", "container_mounts")
    mounts = box.get("mounts", s.get("container_mounts"))
    if not isinstance(mounts, list):
        return
    shared = s.get("shared_dir")
    for i, m in enumerate(mounts):
        if not isinstance(m, str):
            continue
        if runtime == "apptainer" and not _apptainer_mount_ok(m):
            c.err(
                (*mounts_path, i),
                f"{_short(m)} is not an Apptainer bind 'SRC[:DST[:ro|rw]]' of absolute paths "
                "(no spaces or shell metacharacters)",
            )
        elif runtime != "apptainer" and not mount_ok(m):
            c.err(
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
                c.err(
                    (*mounts_path, i),
                    f"{_short(m)} mounts onto {dst}, which would hide slurm.shared_dir "
                    f"{shared} in the container (the job's scripts, venv and reports)",
                    "mount it elsewhere, e.g. under /mnt",
                )


def job_env(c: Checker, s: dict[str, Any]) -> None:
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
                c.err(
                    path,
                    f"{_short(text)} is not a list of interface names (comma-separated, "
                    "at most 15 characters each, no spaces or '/')",
                )
        elif not _FI_VALUE.fullmatch(text):
            c.err(
                path,
                f"{_short(text)} is not a plain libfabric value (letters, digits, '_', '.', "
                "',', '/', '+', '=', '-', not starting with '-'; at most 256 characters)",
            )


def sbatch_args(c: Checker, s: dict[str, Any]) -> None:
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
            c.err(path, str(e))
            continue
        opt = a[2:].partition("=")[0]
        if opt in seen:
            c.err(path, f"--{opt} is given twice")
        seen.add(opt)
        box = s.get("container")
        image = s.get("container_image") or (box.get("image") if isinstance(box, dict) else "")
        if opt in ("environment", "uenv") and image:
            c.err(
                path,
                f"--{opt} and slurm.container both give the job its software: the "
                "tasks would start in one inside the other",
                "keep one of them",
            )
        if opt == "gres" and s.get("gpus_flag", "gpus-per-node") != "none":
            c.err(
                path,
                "--gres here and GPUs requested by slurm.gpus_flag would be two requests",
                "set 'gpus_flag: none' to write the whole --gres yourself",
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
