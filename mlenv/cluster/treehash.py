"""The tree listings and checksums ``sync`` plans and verifies with.

``LIST_SCRIPT`` runs inside each pod (``python3 -c LIST_SCRIPT ROOT``) and prints path →
sha256 of every file; ``sync`` compares it with :func:`local_listing` to plan additions,
updates and (only with ``--delete``) removals, and again afterwards to verify that every
local file arrived. ``SCRIPT`` prints one digest over a tree (:func:`digest_files`
computes the same from memory). Unit tests run the real scripts over real directories
and check they agree with the in-memory functions the fake cluster uses.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Mapping, Sequence

# Paths never synced nor compared: ``results/`` at the top of the tree (runs write there
# in the pods; a ``results`` folder deeper down is ordinary content) and caches at any
# depth. As rsync patterns: a leading "/" anchors at the top, a bare name matches at any
# depth. ``excluded``, ``SCRIPT`` and the kubectl prune step follow the same rules, so the
# checksum never compares a path the copy skipped.
RSYNC_EXCLUDES = ("/results", "__pycache__", ".git")

# Kept dependency-free and short: it runs with the pod image's python3.
SCRIPT = r"""
import hashlib, os, sys
root = sys.argv[1]
entries = []
for d, dirs, files in os.walk(root):
    dirs[:] = sorted(x for x in dirs if not (d == root and x == "results") and x not in ("__pycache__", ".git"))
    for f in files:
        if (d == root and f == "results") or f in ("__pycache__", ".git"):
            continue
        p = os.path.join(d, f)
        with open(p, "rb") as fh:
            h = hashlib.sha256(fh.read()).hexdigest()
        entries.append((os.path.relpath(p, root).replace(os.sep, "/"), h))
t = hashlib.sha256()
for rel, h in sorted(entries):
    t.update(rel.encode() + b"\0" + h.encode() + b"\n")
print(len(entries), t.hexdigest())
"""


def excluded(rel: str) -> bool:
    """True for paths the sync neither copies nor compares (``results`` at the top, caches).

    As rsync applies :data:`RSYNC_EXCLUDES`: a pattern matches a file as well as a folder
    (a submodule's ``.git`` is a file), so the check never expects what the copy skipped.
    """
    parts = rel.split("/")
    if parts[0] == "results":
        return True
    return any(p in ("__pycache__", ".git") for p in parts)


def digest_files(files: Mapping[str, bytes] | Iterable[tuple[str, bytes]]) -> str:
    """``"<count> <sha256>"`` over relative path → content, as ``SCRIPT`` prints it."""
    items = files.items() if isinstance(files, Mapping) else files
    entries = sorted(
        (rel, hashlib.sha256(data).hexdigest()) for rel, data in items if not excluded(rel)
    )
    t = hashlib.sha256()
    for rel, h in entries:
        t.update(rel.encode() + b"\0" + h.encode() + b"\n")
    return f"{len(entries)} {t.hexdigest()}"


def local_files(root: str) -> dict[str, bytes]:
    """Read a local tree into relative path → content (excluded paths left out)."""
    out: dict[str, bytes] = {}
    for d, dirs, files in os.walk(root):
        dirs.sort()
        for f in files:
            p = os.path.join(d, f)
            rel = os.path.relpath(p, root).replace(os.sep, "/")
            if excluded(rel):
                continue
            with open(p, "rb") as fh:
                out[rel] = fh.read()
    return out


# ``sync`` plans from a listing of the pod's tree, the same way for oc and kubectl: the
# copy adds and updates only, and a deletion (``sync --delete``) is an explicit list of
# paths, computed here where the protection rules live, never a mirror of the local tree.
# A symbolic link is copied as a link (oc rsync's -a and tar both keep it), so both
# listings record it as ``symlink:TARGET``, never by the content it points to (which may
# be missing, or outside the tree): same rule here and in :func:`local_listing`.
LINK_PREFIX = "symlink:"

# How every stdlib-only script here runs in a pod. The pod's working directory is the
# image's, /workspace: the very tree sync fills. ``python3 -c`` puts it first on sys.path,
# so a user's own ``json.py`` or ``hashlib.py`` there was imported by the listing (sync
# failed, and ran the user's module as the listing); ``-I`` leaves it out (and ignores
# PYTHON* variables). ``-S`` skips site-packages and their ``.pth`` files, which these
# scripts never use: one start is 13 ms instead of 39 in the tier's pods.
POD_PYTHON = ("python3", "-I", "-S", "-c")

# The pod side of :data:`LIST_SCRIPT` and :data:`COPY_SCRIPT`: path → sha256 of every
# file under root (``symlink:TARGET`` for a link), caches left out at any depth, printed
# as one JSON object. Written out by hand, every character outside printable ASCII as a
# ``\u`` escape (a name's undecodable bytes too, as json.dump writes them): importing
# json (and with it re and enum) was a third of each listing's time in a pod.
_LISTING = r"""
import hashlib, os, sys
def quoted(s):
    if s.isascii() and s.isprintable() and '"' not in s and "\\" not in s:
        return '"' + s + '"'
    out = []
    for c in s:
        n = ord(c)
        if 32 <= n < 127 and c != '"' and c != "\\":
            out.append(c)
        elif n > 0xFFFF:
            n -= 0x10000
            out.append("\\u%04x\\u%04x" % (0xD800 + (n >> 10), 0xDC00 + (n & 0x3FF)))
        else:
            out.append("\\u%04x" % n)
    return '"' + "".join(out) + '"'
def dump(d):
    sys.stdout.write("{" + ", ".join(quoted(k) + ": " + quoted(d[k]) for k in sorted(d)) + "}")
def entry(p):
    if os.path.islink(p):
        return "symlink:" + os.readlink(p)
    if not os.path.isfile(p):
        return None
    h = hashlib.sha256()
    with open(p, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
def listing(root):
    out = {}
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x not in ("__pycache__", ".git"))
        for f in files + [x for x in dirs if os.path.islink(os.path.join(d, x))]:
            p = os.path.join(d, f)
            e = entry(p)
            if e is not None:
                out[os.path.relpath(p, root).replace(os.sep, "/")] = e
    return out
"""

LIST_SCRIPT = _LISTING + "dump(listing(sys.argv[1]))\n"

# kubectl's sync of one pod: one exec, one interpreter, planned by the caller in the
# middle of it. The pod prints its tree (the plan's input) and a line with the caller's
# random mark; the caller answers on stdin with the names it sends (a decimal length, a
# newline, the names NUL-separated) and, when there are any, a tar of just those files,
# which ``tar -x`` unpacks (spawned with this process's stdin, read here only up to the
# names, byte by byte; tar's own output to stderr); then the pod prints the sent names'
# entries as they landed (the check). A sync with nothing to send unpacks nothing and
# lists once. ROOT and MARK are arguments, never part of the script.
COPY_SCRIPT = (
    _LISTING
    + r"""
root, mark = sys.argv[1], sys.argv[2]
dump(listing(root))
sys.stdout.write("\n" + mark + "\n")
sys.stdout.flush()
def take(n):
    got = b""
    while len(got) < n:
        part = os.read(0, n - len(got))
        if not part:
            sys.exit("mlenv sync: the stream ended before the names to unpack")
        got += part
    return got
head = b""
while not head.endswith(b"\n"):
    head += take(1)
size = int(head)
names = [os.fsdecode(n) for n in take(size).split(b"\0")] if size else []
if names:
    pid = os.posix_spawnp(
        "tar", ["tar", "-x", "-f", "-", "-C", root], os.environ,
        file_actions=[(os.POSIX_SPAWN_DUP2, 2, 1)],
    )
    st = os.waitpid(pid, 0)[1]
    rc = os.WEXITSTATUS(st) if os.WIFEXITED(st) else 128 + os.WTERMSIG(st)
    if rc:
        sys.exit(rc)
landed = {}
for n in names:
    e = entry(os.path.join(root, n))
    if e is not None:
        landed[n] = e
dump(landed)
"""
)


def names_header(names: Sequence[str]) -> bytes:
    """What the caller of :data:`COPY_SCRIPT` sends before the tar: the names' length in
    bytes, a newline, the names NUL-separated (any bytes a file name holds)."""
    body = b"\0".join(os.fsencode(n) for n in names)
    return str(len(body)).encode() + b"\n" + body


# Removes exactly the relative paths on stdin (a JSON list) under ROOT, refusing any path
# that is absolute or climbs out; prints how many went. Nothing else is touched. Only the
# folder is resolved, never the entry itself: removing a link removes the link, not the
# file it points to (a checkpoint, or something outside the tree); a folder is left alone.
REMOVE_SCRIPT = r"""
import json, os, sys
root = os.path.realpath(sys.argv[1]); n = 0
for rel in json.load(sys.stdin):
    head, name = os.path.split(rel)
    parent = os.path.realpath(os.path.join(root, head))
    if (rel.startswith("/") or name in ("", ".", "..")
            or not (parent == root or parent.startswith(root + os.sep))):
        continue
    p = os.path.join(parent, name)
    if os.path.isdir(p) and not os.path.islink(p):
        continue
    try:
        os.remove(p); n += 1
    except FileNotFoundError:
        pass
print(n)
"""

# What `sync --delete` never deletes in a pod, whatever the local tree says: run output at
# the top of the tree; checkpoints wherever a training script put them (a `checkpoints/`
# or `checkpoint-500/` folder, DeepSpeed's `global_step*/`, weight files): losing one costs
# hours of GPU time, keeping a stale one costs disk, so the rule errs on keeping; and
# dot-files and dot-directories at any depth (editor state, .cache, .deepspeed_env, ssh
# material) and caches.
PROTECTED_TOP = ("results",)
PROTECTED_PREFIXES = ("checkpoint", "global_step")  # any path component, any case
PROTECTED_SUFFIXES = (".ckpt", ".pt", ".pth", ".safetensors")


def protected(rel: str) -> bool:
    """True for pod paths ``sync --delete`` must leave alone (see :data:`PROTECTED_TOP`)."""
    parts = rel.split("/")
    if len(parts) > 1 and parts[0] in PROTECTED_TOP:
        return True
    if parts[-1].lower().endswith(PROTECTED_SUFFIXES):
        return True
    return any(
        p.startswith(".") or p == "__pycache__" or p.lower().startswith(PROTECTED_PREFIXES)
        for p in parts
    )


def local_listing(root: str) -> dict[str, str]:
    """Relative path → sha256 (or ``symlink:TARGET``) of the local tree, excluded paths
    left out: what :data:`LIST_SCRIPT` prints for the same tree in a pod."""
    out: dict[str, str] = {}
    for d, dirs, files in os.walk(root):
        dirs.sort()
        for f in files + [x for x in dirs if os.path.islink(os.path.join(d, x))]:
            p = os.path.join(d, f)
            rel = os.path.relpath(p, root).replace(os.sep, "/")
            if excluded(rel):
                continue
            if os.path.islink(p):
                out[rel] = LINK_PREFIX + os.readlink(p)
            elif os.path.isfile(p):
                h = hashlib.sha256()
                with open(p, "rb") as fh:
                    for block in iter(lambda: fh.read(1 << 20), b""):
                        h.update(block)
                out[rel] = h.hexdigest()
    return out


def listing_digest(listing: Mapping[str, str]) -> str:
    """``"<count> <sha256>"`` over a listing, for the one-line summary of a sync."""
    t = hashlib.sha256()
    for rel, h in sorted(listing.items()):
        t.update(rel.encode("utf-8", "surrogateescape") + b"\0" + h.encode() + b"\n")
    return f"{len(listing)} {t.hexdigest()}"


def shown(rel: str) -> str:
    """A path as one printable line: as is when it is, else its escaped repr (a newline or
    an undecodable byte in a file name must not break, or crash, the listing)."""
    if rel.isprintable() and not any("\udc80" <= c <= "\udcff" for c in rel):
        return rel
    return ascii(rel)


def sha256_files(files: Mapping[str, bytes]) -> dict[str, str]:
    """Relative path → sha256 hex, as ``LIST_SCRIPT`` prints it."""
    return {rel: hashlib.sha256(data).hexdigest() for rel, data in files.items()}
