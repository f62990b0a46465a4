"""``.deepspeed_env``: the environment remote ranks get.

The DeepSpeed launcher (pdsh backend) forwards only a few variable prefixes (PYTHON*,
MLFLOW*, UCX*, the accelerator's own) to the other nodes; everything else a rank needs
must be in ``~/.deepspeed_env``. The launcher reads it line by line with
``key, val = line.split('=', 1)``, strips the value, wraps it in double quotes when it
holds anything outside ``[\\w@%+=:,./-]`` and pastes ``export KEY=VAL;`` into the remote
shell command. So a value may hold spaces, but never a newline (one line per variable)
nor ``"`` ``$`` `` ` `` ``\\`` (they stay live inside the double quotes); those are
rejected with the variable's name rather than silently mangled.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Collection, Mapping

from mlenv import contract
from mlenv.errors import InputError

# GPUS_PER_NODE, LOCAL_WORLD_SIZE, WORLD_SIZE: static names upstream ml-dev-env's scripts
# read, the same in every pod; an ssh session does not see the pod's own env.
FORWARD_EXACT = (
    "PATH",
    "PYTHONPATH",
    "LD_LIBRARY_PATH",
    "DS_ACCELERATOR",
    "TORCH_EXTENSIONS_DIR",
    "OMP_NUM_THREADS",
    "MASTER_PORT",
    "GPUS_PER_NODE",
    "LOCAL_WORLD_SIZE",
    "WORLD_SIZE",
)
FORWARD_PREFIXES = ("NCCL_", "MLENV_", "CUDA_", "UCX_", "GLOO_", "TORCH_")
# Per-pod values: forwarding pod-0's copy would give every node pod-0's identity or
# devices. CUDA_VISIBLE_DEVICES is set per rank by the launcher itself.
PER_POD = frozenset(
    {
        "MLENV_POD_INDEX",
        "MLENV_POD_NAME",
        "MLENV_NODE_RANK",
        "CUDA_VISIBLE_DEVICES",
        "MLENV_IB_HCA",
        "NODE_RANK",
        "POD_IP",
        "MLENV_NODE_NAME",
    }
)
_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_UNSAFE = re.compile(r'[\n\r"$`\\]')


def select(
    env: Mapping[str, str], *, per_pod_hca: bool, node_keys: Collection[str] = ()
) -> dict[str, str]:
    """The variables of ``env`` to forward, sorted by name.

    ``per_pod_hca``: NCCL_IB_HCA was discovered per pod (``devices: auto``), so pod-0's
    value must not be forwarded; each pod's sshd sets its own instead. ``node_keys``:
    any other variable this pod's init set for itself (e.g. NCCL_SOCKET_IFNAME filtered
    to the interfaces the pod has), kept out for the same reason.
    """
    out: dict[str, str] = {}
    for k in sorted(env):
        if k in PER_POD or k in node_keys or (per_pod_hca and k == "NCCL_IB_HCA"):
            continue
        if k in FORWARD_EXACT or k.startswith(FORWARD_PREFIXES):
            out[k] = env[k]
    if out.get(contract.TOPOLOGY_ENV, "").strip():
        # JSON's double quotes cannot pass DeepSpeed's double-quoted export (init
        # refused the whole file, exit 2); the same racks in the form without quotes
        with contextlib.suppress(ValueError):  # unreadable: left as is, check_value names it
            out[contract.TOPOLOGY_ENV] = contract.topology_compact(out[contract.TOPOLOGY_ENV])
    return out


def check_value(key: str, value: str) -> None:
    """Raise InputError when ``key=value`` cannot travel through ``.deepspeed_env`` intact."""
    if not _KEY.match(key):
        raise InputError(f".deepspeed_env: {key!r} is not a valid shell variable name")
    bad = _UNSAFE.search(value)
    if bad:
        what = {"\n": "a newline", "\r": "a carriage return"}.get(bad.group(0), repr(bad.group(0)))
        raise InputError(
            f".deepspeed_env: {key} contains {what}, which the DeepSpeed launcher cannot pass to "
            "remote ranks (it writes one 'KEY=value' a line into a double-quoted shell export); "
            f"unset or change {key}"
        )
    if value != value.strip():
        raise InputError(
            f".deepspeed_env: {key} has leading or trailing whitespace, which the DeepSpeed "
            "launcher strips; remove it"
        )


def render(variables: Mapping[str, str]) -> str:
    """The file text, one ``KEY=value`` a line; raises InputError on the first unsafe value."""
    lines = []
    for k, v in variables.items():
        check_value(k, v)
        lines.append(f"{k}={v}\n")
    return "".join(lines)


def parse(text: str) -> dict[str, str]:
    """Read the file back exactly as the DeepSpeed launcher does (split once on ``=``, strip)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        k, v = line.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def render_env_file(variables: Mapping[str, str]) -> str:
    """A POSIX ``export`` file (each value single-quoted) for shells and the torchrun path."""

    def q(v: str) -> str:
        return "'" + v.replace("'", "'\"'\"'") + "'"

    return "".join(f"export {k}={q(v)}\n" for k, v in variables.items() if _KEY.match(k))


def launch_file(
    init_vars: Mapping[str, str],
    launch_env: Mapping[str, str],
    *,
    per_pod_hca: bool,
    user_file_text: str = "",
    node_keys: Collection[str] = (),
) -> str:
    """The ``.deepspeed_env`` text for one launch, later sources winning.

    1. ``init_vars``: what ``pod init`` selected from the pod's environment;
    2. the forwarded variables of ``launch_env`` (the user's shell on pod-0), so an
       ``NCCL_*``/``MLENV_*`` changed there reaches every rank; a variable only init
       saw is kept (set it to an empty value to blank it);
    3. ``user_file_text``: a ``./.deepspeed_env`` in the launch directory, line for line
       and unchecked, as DeepSpeed itself reads that file after ``~/.deepspeed_env``.

    Per-pod values are never taken from pod-0 (see :func:`select`). Raises InputError
    on a value of 1. or 2. that cannot travel intact.
    """
    merged = {**init_vars, **select(launch_env, per_pod_hca=per_pod_hca, node_keys=node_keys)}
    for k in PER_POD | set(node_keys) | ({"NCCL_IB_HCA"} if per_pod_hca else set()):
        merged.pop(k, None)
    text = render(dict(sorted(merged.items())))
    # DeepSpeed splits every line on '=' and stops with a traceback on a line without one.
    extra = []
    for no, line in enumerate(user_file_text.splitlines(), 1):
        if not line.strip():
            continue
        if "=" not in line:
            raise InputError(f"./.deepspeed_env:{no}: expected KEY=value, got {line!r}")
        extra.append(f"{line}\n")
    return text + "".join(extra)
