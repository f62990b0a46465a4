"""``hosts:``: the ssh user, key and paths that reach ssh command lines on plain hosts."""

from __future__ import annotations

import re

from mlenv.config.rules.common import _PATH_CHARS, Checker, _abs_path, _get, _python, _short
from mlenv.config.yamlpos import JsonPath

_USER = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
_KEY_PATH = re.compile(r"(/|~/)" + _PATH_CHARS)


def check(c: Checker, active: bool) -> None:
    h = _get(c.data, "hosts")
    h = h if isinstance(h, dict) else {}
    base: JsonPath = ("hosts",)
    nodes = _get(c.data, "nodes", "gpu_nodes")
    if active and not (isinstance(nodes, list) and nodes):
        c.err(
            ("nodes", "gpu_nodes") if isinstance(_get(c.data, "nodes"), dict) else ("platform",),
            "platform: hosts needs the hosts listed in nodes.gpu_nodes (host 0 is the head)",
        )
    user = h.get("ssh_user")
    if isinstance(user, str) and user and not _USER.fullmatch(user):
        c.err(
            (*base, "ssh_user"),
            f"{_short(user)} is not a user name (lower-case letters, digits, "
            "'_', '-', not starting with '-')",
        )
    key = h.get("ssh_key")
    if isinstance(key, str) and key and not _KEY_PATH.fullmatch(key):
        c.err(
            (*base, "ssh_key"),
            f"{_short(key)} is not an absolute or ~/ path (letters, digits, "
            "'_', '.', '/', '+', '-'; no spaces or shell metacharacters)",
        )
    _abs_path(c, (*base, "shared_dir"), h.get("shared_dir"))
    _python(c, (*base, "python"), h.get("python"))
