"""``cluster:``, ``security:``, the free text and the ports: the names Kubernetes derives
objects from, the service account the pods run as, text that reaches a terminal."""

from __future__ import annotations

import dataclasses
import re

from mlenv.config.model import Cluster
from mlenv.config.rules.common import (
    _DOMAIN,
    Checker,
    _as_int,
    _char,
    _get,
    _short,
)

BUILTIN_SERVICE_ACCOUNTS = ("default", "builder", "deployer", "pipeline")
_DEFAULT_PORTS = {
    f.name: f.default for f in dataclasses.fields(Cluster) if f.name in ("ssh_port", "master_port")
}
# C0/C1 controls, DEL and the bidi embedding/override/isolate characters (U+202A-202E,
# U+2066-2069): what makes text on a terminal or in a review differ from its bytes.
_TEXT_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_TEXT_UNSAFE_ML = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_API = re.compile(rf"(?:https://)?{_DOMAIN}/?")


def names(c: Checker) -> None:
    """The cluster's name and namespace (DNS-1123 labels) and its service account."""
    c.label(("cluster", "name"), "cluster name")
    c.label(("cluster", "namespace"), "namespace")
    c.subdomain(
        ("security", "service_account"),
        _get(c.data, "security", "service_account"),
        "service account",
    )
    service_account(c)


def service_account(c: Checker) -> None:
    """the namespace's built-in service accounts are shared by every pod there:
    labelling, granting an SCC to or deleting one of them affects the neighbours."""
    sa = _get(c.data, "security", "service_account")
    if isinstance(sa, str) and sa in BUILTIN_SERVICE_ACCOUNTS:
        c.err(
            ("security", "service_account"),
            f"{sa!r} is a built-in service account of every namespace; mlenv labels, "
            "grants an SCC to and on teardown deletes its service account, which would "
            "affect every pod that runs as it",
            "use a dedicated one, e.g. 'ml-dev-sa' (the default)",
        )


def free_text(c: Checker) -> None:
    """the free-text fields reach a terminal (``list-clusters``, deploy's
    output) and rendered annotations. Text is fine; a control character (an ANSI escape
    that rewrites the screen, a NUL, a carriage return) or a bidi override that makes
    the text read differently from what it is, is not. ``notes`` may span lines."""
    api = _get(c.data, "cluster", "api")
    if isinstance(api, str) and api and not _API.fullmatch(api):
        c.err(
            ("cluster", "api"),
            f"{_short(api)} is not an API server host or URL "
            "(host[:port] or https://host[:port], no spaces or control characters)",
        )
    for path, multiline in (
        (("cluster", "description"), False),
        (("gpus", "type"), False),
        (("notes",), True),
    ):
        v = _get(c.data, *path)
        if not isinstance(v, str):
            continue
        bad = (_TEXT_UNSAFE_ML if multiline else _TEXT_UNSAFE).search(v)
        if bad:
            c.err(
                path,
                f"text contains {_char(bad.group(0))}; free text may not carry "
                "control characters or bidi overrides" + ("" if multiline else ", and is one line"),
            )


def ports(c: Checker) -> None:
    """The launcher's sshd port and the rendezvous port are two ports."""
    ssh, master = (_as_int(c.data.get(k, _DEFAULT_PORTS[k])) for k in ("ssh_port", "master_port"))
    if ssh is not None and ssh == master:
        key = "master_port" if "master_port" in c.data else "ssh_port"
        c.err((key,), f"ssh_port and master_port are both {ssh}; they must differ")
