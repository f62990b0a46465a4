"""The contracts every layer shares, in one stdlib-only module (docs/contracts.md).

Fixed object names and label keys of a deployment, the exit codes and how a verdict maps
to one, and the results document (``results.json``) a run leaves behind: read by the CLI,
by ``mlenv.pod launch`` inside pod-0 and by the records of past runs. Stdlib only, like
``mlenv.errors``: the pod image's Python imports it too.
"""

from __future__ import annotations

import json
import math
import os
import re
import secrets
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mlenv.errors import (
    EXIT_ERROR,
    EXIT_FAIL,
    EXIT_INPUT,
    EXIT_OK,
    EXIT_SIGINT,
    EXIT_SIGTERM,
    InputError,
)

__all__ = [
    "ANNOTATION_CREATED",
    "APP",
    "EXIT_ERROR",
    "EXIT_FAIL",
    "EXIT_INPUT",
    "EXIT_OK",
    "LABEL_COMPONENT",
    "LABEL_INSTANCE",
    "LABEL_MANAGED_BY",
    "LABEL_NAME",
    "LABEL_NAMESPACE",
    "LABEL_PART_OF",
    "MANAGED_BY",
    "RESULTS_JSON",
    "RESULTS_JSONL",
    "TOPOLOGY_ENV",
    "exit_for_doc",
    "exit_for_verdict",
    "dumps_safe",
    "is_run_id",
    "json_safe",
    "loads_bounded",
    "read_regular",
    "new_run_id",
    "read_results",
    "rack_name",
    "shown",
    "topology_compact",
    "topology_decode",
    "topology_json",
]

# --- names (not configurable: one deployment per namespace) ---------------------------
APP = "ml-dev-env"  # app.kubernetes.io/name and part-of; also upstream ml-dev-env's prefix
# (the worker object, mlenv.workload, is named APP too)
HEADLESS_SERVICE = "ml-dev-env-headless"
IMAGE_STREAM = "ml-dev-env"
BUILD_CONFIG = "ml-dev-env"
MANAGED_BY = "mlenv"


# --- label keys ---------------------------------------------------------------------------
LABEL_NAME = "app.kubernetes.io/name"
LABEL_INSTANCE = "app.kubernetes.io/instance"  # carries cluster.name
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_PART_OF = "app.kubernetes.io/part-of"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
# Cluster-scoped objects (the RDMA SCC and its ClusterRole) carry the namespace of the
# deployment that owns them: two teams may deploy configs with the same cluster name
# into two namespaces, and one's teardown must never delete what the other's pods use.
LABEL_NAMESPACE = "ml-dev-env.io/namespace"
# Set by `mlenv deploy` on the objects it created (never on ones that existed before and
# were adopted, such as a pre-created ServiceAccount); teardown deletes only these.
ANNOTATION_CREATED = "ml-dev-env.io/created-by"
# Set by `mlenv quarantine RUN --apply` on a Kubernetes Node that failed a run:
# the label and a NoSchedule taint with this key, the run id and check in the annotation.
# `mlenv release` removes only what carries its own run id there.
LABEL_HEALTH = "ml-dev-env.io/health"
# The quarantine's label value and its taint, ``ml-dev-env.io/health=fail:NoSchedule``: the
# marks (cluster/nodemarks.py) and the re-check Pod's one toleration (render/recheck.py).
HEALTH_FAIL = "fail"
TAINT_EFFECT = "NoSchedule"
ANNOTATION_QUARANTINE = "ml-dev-env.io/quarantine"
# With `nodes.pin_by: label`, `mlenv deploy` labels each pinned Node
# ``pool.ml-dev-env.io/<namespace>=<cluster.name>`` and the pods select that one label, where
# a node affinity naming every pinned node would repeat all N names in each of N pods (a pod
# list of 11 MB at 512 pinned nodes). The key carries the namespace, the value the cluster
# name: a node pinned by two deployments in one namespace is refused, not stolen.
# Teardown takes the label off the nodes that carry this deployment's value.
LABEL_POOL_PREFIX = "pool.ml-dev-env.io/"

# --- results of a run ---------------------------------------------------------------------
RESULTS_JSON = "results.json"  # the verdict document rank 0 (or the CLI's recovery) writes
RESULTS_JSONL = "results.jsonl"  # one line per result as measured, kept through crashes

# SKIPPED (no check measured anything) is not a pass: 1, like FAIL, so a CI gate on the
# exit code stops; the verdict line tells the two apart.
_VERDICT_EXIT = {"PASS": EXIT_OK, "FAIL": EXIT_FAIL, "SKIPPED": EXIT_FAIL}

# One run-id format everywhere: results.json, the report folder's name, what the
# CLI prints, the history line, Slurm and hosts runs. UTC time first (sorts by start), then
# 6 hex digits so two runs started in the same second never share an id.
RUN_ID_FORMAT = "YYYYMMDD-HHMMSS-xxxxxx"
_RUN_ID = re.compile(r"^[0-9]{8}-[0-9]{6}-[0-9a-f]{6}$")


def new_run_id(now: float | None = None) -> str:
    """A new run id, ``YYYYMMDD-HHMMSS-xxxxxx`` (UTC start time, random suffix)."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime(now)) + "-" + secrets.token_hex(3)


def is_run_id(text: object) -> bool:
    """True when ``text`` has the run-id format (a folder named like one names its run)."""
    return isinstance(text, str) and bool(_RUN_ID.match(text))


def exit_for_verdict(verdict: object, interrupted_by: object = None) -> int:
    """0 PASS, 1 FAIL or SKIPPED, INTERRUPTED 130 (SIGINT) or 143 (any other signal, ``interrupted_by``),
    3 for ERROR and anything else (a missing or unknown verdict is never a pass)."""
    if verdict == "INTERRUPTED":
        return EXIT_SIGINT if interrupted_by in (None, "SIGINT") else EXIT_SIGTERM
    return _VERDICT_EXIT.get(verdict, EXIT_ERROR) if isinstance(verdict, str) else EXIT_ERROR


def exit_for_doc(doc: dict[str, Any] | None) -> int:
    """The exit code of a results document (:func:`exit_for_verdict` with its ``interrupted``)."""
    if not isinstance(doc, dict):
        return EXIT_ERROR
    why = doc.get("interrupted")
    return exit_for_verdict(
        doc.get("verdict"), why.get("signal") if isinstance(why, dict) else None
    )


# How long a run may go on once rank 0 has written its verdict (pod launch) or rank 0's
# host has ended (hosts) before the ranks still left are stopped on every node: the
# others only destroy their process group and leave, a healthy run within seconds.
AFTER_VERDICT_GRACE_ENV = "MLENV_AFTER_VERDICT_GRACE_S"
AFTER_VERDICT_GRACE_S = 60.0


def after_verdict_grace_s(environ: Mapping[str, str]) -> float:
    """``$MLENV_AFTER_VERDICT_GRACE_S`` in ``environ``, else :data:`AFTER_VERDICT_GRACE_S`."""
    return float(environ.get(AFTER_VERDICT_GRACE_ENV) or AFTER_VERDICT_GRACE_S)


# The most nodes (pods, hosts) one deployment or run may have: far above any cluster mlenv
# deploys to, and far below where a pasted 20-digit number would become a StatefulSet's
# replicas (int32) or a hostfile of that many lines.
MAX_NODES = 10_000


# --- reading what anyone may have written ---------------------------------------
# Results documents, history lines and bundles come from other machines and other hands: a
# reader opens only regular files (a FIFO would hang it, a link would read what it points
# at), reads a bounded amount, and parses numbers only within what a measurement can be.
MAX_DOC_BYTES = 256 * 2**20
MAX_INT_DIGITS = 20  # 2**64 has 20 digits: no count, byte size or id of ours is longer
MAX_JSON_DEPTH = 64  # results.json nests 4 deep; this leaves room and stops a stack bomb


def read_regular(path: str | os.PathLike[str], max_bytes: int = MAX_DOC_BYTES) -> bytes:
    """The bytes of ``path`` if it is a regular file and at most ``max_bytes``; OSError with
    one line (``strerror``) otherwise: a link (never followed), a FIFO, a device, a folder,
    or a file too big. Opening never blocks (a FIFO without a writer is refused, not waited on)."""
    import errno
    import stat

    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise OSError(
                errno.ELOOP, "a symbolic link: refused (never followed)", str(path)
            ) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = (
                "a FIFO"
                if stat.S_ISFIFO(st.st_mode)
                else "a folder"
                if stat.S_ISDIR(st.st_mode)
                else "a device"
                if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)
                else "a socket"
                if stat.S_ISSOCK(st.st_mode)
                else "not a file"
            )
            raise OSError(errno.EINVAL, f"{kind}, not a regular file: refused", str(path))
        if st.st_size > max_bytes:
            raise OSError(errno.EFBIG, f"{st.st_size} bytes, more than {max_bytes}", str(path))
        chunks: list[bytes] = []
        got = 0
        while chunk := os.read(fd, min(1 << 20, max_bytes + 1 - got)):
            chunks.append(chunk)
            got += len(chunk)
            if got > max_bytes:  # it grew while read
                raise OSError(errno.EFBIG, f"more than {max_bytes} bytes", str(path))
        return b"".join(chunks)
    finally:
        os.close(fd)


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError(
            f"a number of {len(text.lstrip('-'))} digits (at most {MAX_INT_DIGITS} are read)"
        )
    return int(text)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} is out of range")
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def loads_bounded(text: str | bytes) -> Any:
    """``json.loads`` for documents from elsewhere: integers of at most
    :data:`MAX_INT_DIGITS` digits, finite floats, no ``NaN``/``Infinity``, nesting at most
    :data:`MAX_JSON_DEPTH` deep. Every refusal is a ValueError with one line (a nesting
    bomb too, never a RecursionError)."""
    try:
        doc = json.loads(
            text,
            parse_int=_bounded_int,
            parse_float=_finite_float,
            parse_constant=_no_constant,
        )
    except RecursionError:
        raise ValueError(f"nested more than {MAX_JSON_DEPTH} deep") from None
    stack: list[tuple[Any, int]] = [(doc, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict | list):
            if depth > MAX_JSON_DEPTH:
                raise ValueError(f"nested more than {MAX_JSON_DEPTH} deep")
            items = value.values() if isinstance(value, dict) else value
            stack.extend((v, depth + 1) for v in items if isinstance(v, dict | list))
    return doc


def json_safe(value: Any) -> Any:
    """``value`` with every non-finite float (NaN, ±Infinity) as None: what JSON can hold.
    Written documents and ``-o json`` go through here, so no reader ever meets ``NaN``."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value


def dumps_safe(value: Any, **kw: Any) -> str:
    """``json.dumps`` of :func:`json_safe` ``(value)``, strict (``allow_nan=False``)."""
    return json.dumps(json_safe(value), allow_nan=False, **kw)


def read_results(report_dir: str | Path, since: float | None = None) -> dict[str, Any] | None:
    """``report_dir/results.json`` as a dict, or None when absent, unreadable, not an object,
    or (with ``since``, a ``time.time()``) written before that moment: a report left by an
    earlier run must never be taken for this one's."""
    path = os.path.join(report_dir, RESULTS_JSON)
    try:
        if (
            since is not None and os.stat(path).st_mtime < since - 1.0
        ):  # coarse mtime on some filesystems
            return None
        doc = loads_bounded(read_regular(path).decode("utf-8"))
    except (OSError, ValueError):  # UnicodeDecodeError is a ValueError
        return None
    return doc if isinstance(doc, dict) else None


def node_status(doc: dict[str, Any], node: str) -> str | None:
    """The status a results document's ``node_verdicts`` give ``node`` (its Kubernetes or
    Slurm name), or None when the run has no verdict for it."""
    sec = doc.get("node_verdicts")
    for n in sec.get("nodes", []) if isinstance(sec, dict) else []:
        if isinstance(n, dict) and n.get("node") == node:
            return str(n.get("status"))
    return None


def shown(value: object, keep: str = "") -> str:
    """``value`` as text that is safe on a terminal: each character a terminal would act on
    instead of showing it — C0 and C1 controls (ESC starting an OSC title or clipboard
    write, ``\\r`` moving back over a REGRESSION line, ``\\n`` forging one), DEL, bidi
    overrides and other format characters — is written as its escape (``\\x1b``,
    ``\\r``, ``\\u202e``). Results documents, history lines and bundles come from
    anywhere, so every value read from them passes through here before it is printed.
    It is the one rule for every output: the terminal, ``summary.md`` and ``junit.xml``
    too; its result holds only printable characters (and ``keep``), each of which XML 1.0
    allows, so a JUnit file stays valid XML whatever a report held. ``keep``: characters
    left as they are (``"\\n"`` for a message of
    several lines of our own).
    """
    text = str(value)
    if text.isprintable():
        return text
    return "".join(
        c if c.isprintable() or c in keep else c.encode("unicode_escape").decode("ascii")
        for c in text
    )


# --- racks ---------------------------------------------------------------
# MLENV_TOPOLOGY: rack → nodes for fabric.localize on rank 0. JSON wherever a value is
# quoted for us (the StatefulSet env, the sbatch exports, the hosts plan, the pod
# launcher's --topology); in .deepspeed_env the compact form "rack=node,node;rack=node",
# because DeepSpeed's pdsh runner pastes each value into a double-quoted shell export
# where JSON's own double quotes cannot survive. Rack names are DNS labels and node
# names host or Node names, so '=', ',' and ';' never occur inside either.
TOPOLOGY_ENV = "MLENV_TOPOLOGY"
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def is_dns_label(name: object) -> bool:
    """Whether ``name`` is a DNS-1123 label (lower-case letters, digits and '-', at most 63
    characters): what cluster and rack names are, so each is safe as one path component."""
    return isinstance(name, str) and _DNS_LABEL.fullmatch(name) is not None


def rack_name(value: str) -> str | None:
    """A name from elsewhere (a Node label's value, a Slurm switch name) as a rack name, a
    DNS label: lowercased, '_' and '.' as '-'. None when that still is not one (empty, too
    long, other characters)."""
    name = value.strip().lower().replace("_", "-").replace(".", "-")
    return name if is_dns_label(name) else None


def topology_json(racks: dict[str, list[str]]) -> str:
    """The JSON form of rack → nodes (no spaces), as every platform hands it over."""
    return json.dumps(racks, separators=(",", ":"))


def topology_decode(text: str) -> object:
    """``MLENV_TOPOLOGY`` in either form → the decoded document (for JSON, whatever it holds;
    the caller checks its shape). Raises ValueError with one line when it cannot be read."""
    text = text.strip()
    if not text[:1].isalnum():  # the compact form starts with a rack name; anything else is JSON
        try:
            return json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(
                f"{TOPOLOGY_ENV} is not JSON: {e.msg} (line {e.lineno}, column {e.colno})"
            ) from None
    out: dict[str, list[str]] = {}
    for part in filter(None, text.split(";")):
        rack, eq, nodes = part.partition("=")
        if not eq:
            raise ValueError(f"{TOPOLOGY_ENV}: {part[:40]!r} is neither JSON nor 'rack=node,node'")
        out[rack.strip()] = [n.strip() for n in nodes.split(",")]
    return out


def topology_compact(text: str) -> str:
    """``MLENV_TOPOLOGY`` (either form) in the compact form for ``.deepspeed_env``.
    ValueError when it cannot be read or a name would break the form."""
    doc = topology_decode(text)
    if not isinstance(doc, dict) or not all(isinstance(v, list) for v in doc.values()):
        raise ValueError(f"{TOPOLOGY_ENV} must map each rack to a list of nodes")
    words = [str(w) for rack, nodes in doc.items() for w in (rack, *nodes)]
    if any(re.search(r"[=,;\s\"'$`\\]", w) or not w for w in words):
        raise ValueError(
            f"{TOPOLOGY_ENV}: a rack or node name holds '=', ',', ';', a quote or a blank"
        )
    return ";".join(f"{rack}={','.join(str(n) for n in nodes)}" for rack, nodes in doc.items())


# -- a Pushgateway URL (acceptance.metrics.push, mlenv metrics --push) ---------------------
# It reaches a pod's argv, an sbatch script and a cron line: scheme, host, port and a plain
# path only. No query, no ``%`` (cron turns it into a newline), no spaces, and never
# credentials: a config, a CronJob and a crontab are read by many.
_PUSH_URL = re.compile(
    r"https?://(?:[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?|\[[0-9A-Fa-f:.]{2,45}\])"
    r"(?::[0-9]{1,5})?(?:/[A-Za-z0-9._~/-]{0,200})?"
)


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def push_url(value: str, what: str = "Pushgateway URL") -> str:
    """``value`` if it is an ``http(s)://HOST[:PORT][/PATH]`` without credentials; InputError
    (exit 2) otherwise. One grammar for the config key, ``mlenv metrics --push`` and the
    suite's ``--push-metrics``."""
    if not isinstance(value, str) or not value.startswith(("http://", "https://")):
        raise InputError(f"{what} {_shown(value)}: expected an http:// or https:// URL")
    authority = value.split("://", 1)[1].split("/", 1)[0]
    if "@" in authority:
        raise InputError(
            f"{what} {value.split('://', 1)[0]}://…@{authority.rsplit('@', 1)[1]}: carries "
            "credentials (user:password@); configs, CronJobs and crontabs are read by many, "
            "so a URL here may not hold them"
        )
    if not _PUSH_URL.fullmatch(value):
        raise InputError(
            f"{what} {_shown(value)}: expected http(s)://HOST[:PORT][/PATH], the path of letters, "
            "digits and . _ ~ / - (no query, no %, no spaces)"
        )
    return value


# -- the follow stream of a detached run (``python -m mlenv.pod run-follow``) -------------
# "@mlenv:o END TEXT": a line of the run's output that ends at byte END of its output
# file; "@mlenv:x STATUS": the run ended with that exit status ("lost": its supervisor
# died without writing one; "none": no such run in the pod). A follower whose stream
# dropped re-opens it from the last END: no line lost or repeated. Anything else on the
# stream is the follower's own message (or the client's), passed on as it is.
FOLLOW_OUT = "@mlenv:o "
FOLLOW_EXIT = "@mlenv:x "
FOLLOW_LOST = "lost"
FOLLOW_NONE = "none"
# A line longer than this without an end is sent as it is (a progress bar that never
# prints a newline must not hold the follower's output back without bound).
FOLLOW_LONG_LINE = 64 * 1024
_LINE_END = re.compile(rb"\r\n|\r|\n")


def follow_lines(buf: bytes, base: int, final: bool) -> tuple[list[tuple[int, str]], int]:
    """The complete lines of ``buf`` (read from byte ``base`` of the output) as
    ``(end offset, text)``, and how many bytes of it they took. ``\\r`` ends a line too
    (progress bars), except as the last byte while more may follow (it may be half of
    ``\\r\\n``). ``final``: the run has ended, so the rest is a line whatever its end; a
    line over :data:`FOLLOW_LONG_LINE` bytes goes as it is."""
    out: list[tuple[int, str]] = []
    pos = 0
    for m in _LINE_END.finditer(buf):
        if m.group() == b"\r" and m.end() == len(buf) and not final:
            break
        out.append((base + m.end(), _follow_text(buf[pos : m.start()])))
        pos = m.end()
    while len(buf) - pos > FOLLOW_LONG_LINE:
        out.append((base + pos + FOLLOW_LONG_LINE, _follow_text(buf[pos : pos + FOLLOW_LONG_LINE])))
        pos += FOLLOW_LONG_LINE
    if final and pos < len(buf):
        out.append((base + len(buf), _follow_text(buf[pos:])))
        pos = len(buf)
    return out, pos


def _follow_text(b: bytes) -> str:
    return b.decode("utf-8", "replace")


def follow_frame(line: str) -> tuple[str, str, int]:
    """One line of a follow stream read back as ``(kind, text, end)``: kind "out" (a line
    of output ending at byte ``end``), "exit" (text: the status, or lost/none) or "other"."""
    if line.startswith(FOLLOW_OUT):
        end, _, text = line[len(FOLLOW_OUT) :].partition(" ")
        if end.isdigit() and len(end) <= MAX_INT_DIGITS:
            return "out", text, int(end)
    elif line.startswith(FOLLOW_EXIT):
        return "exit", line[len(FOLLOW_EXIT) :].strip(), 0
    return "other", line, 0
