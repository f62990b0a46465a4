"""``image:``: the pods' image reference and the build's git source, which reach the
registry, git and BuildConfigs."""

from __future__ import annotations

import re

from mlenv.config.rules.common import _IMAGE_REF, Checker, _get, _short

_GIT_URI = re.compile(
    r"(https://[A-Za-z0-9.-]+(:[0-9]+)?/[A-Za-z0-9._~%/+-]+"
    r"|ssh://([A-Za-z0-9._-]+@)?[A-Za-z0-9.-]+(:[0-9]+)?/[A-Za-z0-9._~%/+-]+"
    r"|[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:[A-Za-z0-9._~/+-]+)"
)


def check(c: Checker) -> None:
    """image refs and build sources reach the registry, git and BuildConfigs."""
    ref = _get(c.data, "image", "ref")
    if isinstance(ref, str) and ref and not _IMAGE_REF.fullmatch(ref):
        c.err(
            ("image", "ref"),
            f"{_short(ref)} is not an image reference "
            "(registry/name[:tag][@sha256:digest], no spaces or control characters)",
        )
    uri = _get(c.data, "image", "build", "git_uri")
    if isinstance(uri, str) and uri and not _GIT_URI.fullmatch(uri):
        c.err(
            ("image", "build", "git_uri"),
            f"{_short(uri)} is not an https://, ssh:// or git@host:path repository URL",
            "other transports (ext::, file://, a path, an option) can run commands or read "
            "the builder's files",
        )
    ref_ = _get(c.data, "image", "build", "git_ref")
    if isinstance(ref_, str) and ref_ and not _git_ref_ok(ref_):
        c.err(
            ("image", "build", "git_ref"),
            f"{_short(ref_)} is not a git branch, tag or commit name (letters, digits "
            "and ._/+-, not starting with '-', no '..')",
        )
    path = _get(c.data, "image", "build", "dockerfile_path")
    if isinstance(path, str) and path and not _dockerfile_ok(path):
        c.err(
            ("image", "build", "dockerfile_path"),
            f"{_short(path)} is not a relative path inside the repository (no leading "
            "'/', no '..' segment, no control characters)",
        )


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
