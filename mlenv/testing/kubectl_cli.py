"""A stateful fake ``kubectl``: the argv :class:`mlenv.cluster.oc.OcCluster` emits, applied
to a :class:`~mlenv.testing.fakecluster.FakeCluster` loaded from (and saved back to) a
state file, answered the way ``kubectl`` answers.

It exists for the client contract suite (tests/integration/test_client_contract.py):
the same scenario runs against ``FakeCluster`` directly and against ``OcCluster`` driving
this program, so the fake cannot drift from the client. Run it as a script
(``python -m mlenv.testing.kubectl_cli``) through a small ``kubectl`` (or ``oc``: it also
answers ``oc whoami [--show-server]``) wrapper on PATH; ``FAKE_KUBECTL_STATE`` names the
state file.

Answers follow kubectl: JSON for ``--output=json``, ``List`` objects for lists,
``kind.group/name`` for ``--output=name``, ``yes``/``no`` with exit 0/1 for
``auth can-i``, and errors as kubectl prints an API status
(``Error from server (NotFound): pods "x" not found``, ``Error from server (Forbidden):
…``, ``The StatefulSet "x" is invalid: …`` for a 422, ``error: Apply failed with 1
conflict: conflict with "m" using apps/v1: .spec.x`` and kubectl's advice for a 409),
exit 1. An argv it does not understand (an unknown verb, option, resource word or
selector shape) is exit :data:`UNSUPPORTED` with the whole argv on stderr: a change in
how the client calls ``kubectl`` fails loudly here instead of passing against a fake
that guessed.
"""

from __future__ import annotations

import datetime
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NoReturn, cast

from mlenv.cluster.api import (
    CLUSTER_SCOPED_KINDS,
    ApiError,
    Conflict,
    ExecTimeout,
    Forbidden,
    Invalid,
    NotFound,
    Unreachable,
)
from mlenv.cluster.oc import OcCluster
from mlenv.testing.fakecluster import FakeCluster

STATE_ENV = "FAKE_KUBECTL_STATE"
UNSUPPORTED = 64  # EX_USAGE: the fake does not understand this argv

# kubectl's own text after a server-side apply conflict (staging/src/k8s.io/kubectl/pkg/
# cmd/apply/apply.go), printed after the API server's message.
CONFLICT_ADVICE = """\
Please review the fields above--they currently have other managers. Here
are the ways you can resolve this warning:
* If you intend to manage all of these fields, please re-run the apply
  command with the `--force-conflicts` flag.
* If you do not intend to manage all of the fields, please edit your
  manifest to remove references to the fields that should keep their
  current managers.
* You may co-own fields by updating your manifest to match the existing
  value; in this case, you'll become the manager if the other manager(s)
  stop managing the field (remove it from their configuration).
See https://kubernetes.io/docs/reference/using-api/server-side-apply/#conflicts"""

# Options each command takes: name → whether it carries a value (``--name=value``).
_OPTIONS: dict[str, dict[str, bool]] = {
    "get": {
        "--output": True,
        "--ignore-not-found": False,
        "--all-namespaces": False,
        "--selector": True,
        "--field-selector": True,
        "--raw": True,
    },
    "apply": {
        "--server-side": False,
        "--field-manager": True,
        "--output": True,
        "--filename": True,
        "--force-conflicts": False,
        "--dry-run": True,
    },
    "delete": {"--cascade": True, "--ignore-not-found": False, "--wait": True, "--output": True},
    "auth can-i": {"--as": True, "--subresource": True},
    "create": {"--output": True, "--filename": True},
    "auth whoami": {"--output": True},
    "config view": {"--minify": False, "--output": True},
    "logs": {"--tail": True, "-f": False},
    "exec": {"-i": False},
    "whoami": {"--show-server": False},  # oc only: kubectl has `auth whoami`
}
_EVERYWHERE = {
    "--namespace": True,
    "--request-timeout": True,
    "--kubeconfig": True,
    "--context": True,
}
WHOAMI_JSONPATH = "jsonpath={.status.userInfo.username}"
SERVER_JSONPATH = "jsonpath={.clusters[0].cluster.server}"


class Unsupported(Exception):
    """An argv this fake does not understand."""


class KubectlError(Exception):
    """What kubectl prints on stderr before exiting 1."""


@dataclass
class Call:
    """One parsed command line."""

    command: str
    namespace: str | None = None
    options: dict[str, str] = field(default_factory=dict)
    positionals: list[str] = field(default_factory=list)
    container_argv: list[str] = field(default_factory=list)  # exec only


def _split_option(word: str, allowed: dict[str, bool]) -> tuple[str, str]:
    name, eq, value = word.partition("=")
    if name == "-n":
        raise Unsupported("-n takes its value as the next word")
    if name not in allowed:
        raise Unsupported(f"unknown option {word!r}")
    if allowed[name] != bool(eq):
        raise Unsupported(f"option {name} {'needs' if allowed[name] else 'takes no'} value")
    return name, value


def parse(args: Sequence[str]) -> Call:
    """The command, namespace, options and names of a kubectl argv (Unsupported when the
    fake does not know a word)."""
    words = list(args)
    namespace: str | None = None
    # global options before the command: `-n NS`, `--kubeconfig=…`, `--context=…`
    while words and words[0].startswith("-"):
        w = words.pop(0)
        if w == "-n" and words:
            namespace = words.pop(0)
        else:
            name, value = _split_option(w, _EVERYWHERE)
            if name == "--namespace":
                namespace = value
    if not words:
        raise Unsupported("no command")
    command = words.pop(0)
    if command in ("auth", "config"):
        # `auth [--namespace=NS] [--kubeconfig=…] can-i …`: OcCluster puts the namespace
        # and the client flags right after the first word
        while words and words[0].startswith("-"):
            name, value = _split_option(words.pop(0), _EVERYWHERE)
            if name == "--namespace":
                namespace = value
        if not words:
            raise Unsupported(f"{command} without a subcommand")
        command = f"{command} {words.pop(0)}"
    if command not in _OPTIONS:
        raise Unsupported(f"unknown command {command!r}")
    allowed = {**_EVERYWHERE, **_OPTIONS[command]}
    call = Call(command, namespace)
    while words:
        w = words.pop(0)
        if w == "--":
            if command == "exec":
                call.container_argv = words
            else:
                call.positionals = words
            break
        if not w.startswith("-"):
            if command == "exec" and not call.positionals:
                call.positionals = [w]  # the pod: before exec's `--`
                continue
            raise Unsupported(f"positional {w!r} before '--' (the client puts names after it)")
        name, value = _split_option(w, allowed)
        if name == "--namespace":
            call.namespace = value
        elif name not in ("--request-timeout", "--kubeconfig", "--context"):
            call.options[name] = value
    return call


def _kind(word: str) -> str:
    """The kind a resource word names: OcCluster passes kinds (``StatefulSet``)."""
    if not word[:1].isupper() or not word.isalnum():
        raise Unsupported(f"resource word {word!r} (the client passes kinds such as Pod)")
    return word


def _selector(text: str) -> dict[str, str]:
    out = {}
    for term in text.split(","):
        key, eq, value = term.partition("=")
        if not eq or not key or key.endswith("!") or "=" in value:
            raise Unsupported(f"selector term {term!r} (only key=value)")
        out[key] = value
    return out


def _need(call: Call, option: str, *values: str) -> str:
    value = call.options.get(option)
    if value not in values:
        raise Unsupported(f"{call.command} {option}={value} (expected one of {list(values)})")
    return value


def _ns(kind: str, call: Call) -> str | None:
    return None if kind in CLUSTER_SCOPED_KINDS else call.namespace


def _timestamp(i: int) -> str:
    moment = datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc) + datetime.timedelta(
        seconds=i
    )
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _group(api_version: str) -> str:
    return api_version.split("/")[0] if "/" in api_version else ""


def run(fake: FakeCluster, call: Call, stdin: str, out: Callable[[str], None]) -> int:
    """Apply one parsed call to the fake; returns the exit code."""
    c, opts, names = call.command, call.options, call.positionals
    if c == "config view":
        if "--minify" not in opts or opts.get("--output") != SERVER_JSONPATH or names:
            raise Unsupported("config view other than --minify with the server jsonpath")
        out(fake.server_url)  # kubectl reads the kubeconfig: no API call, no reachability
        return 0
    if c == "whoami":  # oc: the user, or with --show-server the server (from the kubeconfig)
        if names:
            raise Unsupported("whoami takes no names")
        out((fake.server_url if "--show-server" in opts else fake.whoami()) + "\n")
        return 0
    if c == "auth whoami":
        _need(call, "--output", WHOAMI_JSONPATH)
        out(fake.whoami())
        return 0
    if c == "auth can-i":
        if len(names) != 2:
            raise Unsupported("auth can-i takes VERB RESOURCE")
        allowed = fake.can_i(
            names[0],
            names[1],
            call.namespace,
            as_user=opts.get("--as"),
            subresource=opts.get("--subresource"),
        )
        out("yes\n" if allowed else "no\n")
        return 0 if allowed else 1
    if c == "get" and "--raw" in opts:
        if names or len(opts) != 1 or call.namespace:
            raise Unsupported("get --raw=PATH alone")
        if opts["--raw"] != "/version":
            return _raw_list(fake, opts["--raw"], out)
        fake.server()
        out(json.dumps({"major": "1", "minor": "30", "gitVersion": "v1.30.0-fake"}))
        return 0
    if c == "get":
        return _get(fake, call, out)
    if c == "apply":
        return _apply(fake, call, stdin, out)
    if c == "create":
        return _create_reviews(fake, call, stdin, out)
    if c == "delete":
        return _delete(fake, call, out)
    if c == "logs":
        if len(names) != 1 or not call.namespace:
            raise Unsupported("logs --namespace=NS [--tail=N] -- POD")
        tail = opts.get("--tail")
        if tail is not None and not tail.isdigit():
            raise Unsupported(f"--tail={tail}")
        out(
            fake.logs(
                names[0],
                call.namespace,
                follow="-f" in opts,
                tail=int(tail) if tail is not None else None,
            )
        )
        return 0
    if c == "exec":
        return _exec(fake, call, stdin, out)
    raise Unsupported(f"command {c!r}")


def _get(fake: FakeCluster, call: Call, out: Callable[[str], None]) -> int:
    """``get KIND [NAME]`` and ``get events``, as JSON."""
    opts, names = call.options, call.positionals
    _need(call, "--output", "json")
    if len(names) == 1 and names[0] == "events":
        return _events(fake, call, out)
    if names and all("/" in n for n in names):
        return _get_refs(fake, call, out)
    if len(names) == 2:
        if set(opts) != {"--output", "--ignore-not-found"}:
            raise Unsupported("get KIND NAME needs exactly --output=json --ignore-not-found")
        kind = _kind(names[0])
        obj = fake.get(kind, names[1], _ns(kind, call))
        if obj is not None:
            out(json.dumps(obj, indent=4) + "\n")
        return 0
    if len(names) != 1 or set(opts) - {"--output", "--all-namespaces", "--selector"}:
        raise Unsupported("get KIND [--all-namespaces] [--selector=…]")
    # `get K1,K2`: one List of every kind's objects (a refusal of any fails the call)
    kinds = [_kind(word) for word in names[0].split(",")]
    every = "--all-namespaces" in opts
    if any(every == bool(call.namespace) and k not in CLUSTER_SCOPED_KINDS for k in kinds):
        raise Unsupported("a namespaced list needs exactly one of --namespace, --all-namespaces")
    items = [
        item
        for kind in kinds
        for item in fake.list(
            kind,
            None if every else _ns(kind, call),
            _selector(opts["--selector"]) if "--selector" in opts else None,
        )
    ]
    out(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "List",
                "items": items,
                "metadata": {"resourceVersion": ""},
            },
            indent=4,
        )
        + "\n"
    )
    return 0


def _raw_list(fake: FakeCluster, raw: str, out: Callable[[str], None]) -> int:
    """``get --raw=/api/v1[/namespaces/NS]/pods[?labelSelector=…]`` (and the other lists
    of :data:`~mlenv.cluster.oc.RAW_LISTS`): the server's List, compact, its items without
    kind and apiVersion (as the API sends them)."""
    from urllib.parse import parse_qs, urlsplit

    from mlenv.cluster.oc import RAW_LISTS

    url = urlsplit(raw)
    parts = url.path.strip("/").split("/")
    head = 2 if parts[:1] == ["api"] else 3
    base, rest = parts[:head], parts[head:]
    namespace = None
    if len(rest) == 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    kinds = [
        k
        for k, (group, version, resource) in RAW_LISTS.items()
        if base == (["apis", group, version] if group else ["api", version]) and rest == [resource]
    ]
    query = parse_qs(url.query)
    if len(kinds) != 1 or set(query) - {"labelSelector"}:
        raise Unsupported(f"get --raw={raw}")
    selector = _selector(query["labelSelector"][0]) if "labelSelector" in query else None
    items = [
        {k: v for k, v in obj.items() if k not in ("kind", "apiVersion")}
        for obj in fake.list(kinds[0], namespace, selector)
    ]
    out(json.dumps({"kind": f"{kinds[0]}List", "items": items}))
    return 0


def _get_refs(fake: FakeCluster, call: Call, out: Callable[[str], None]) -> int:
    """``get KIND/NAME … --ignore-not-found``: one object as itself, several as a List of
    those found (get_many). A refused read fails the whole call (kubectl prints the
    objects it found, the client discards them on exit 1)."""
    if set(call.options) != {"--output", "--ignore-not-found"}:
        raise Unsupported("get KIND/NAME … needs exactly --output=json --ignore-not-found")
    found = []
    for word in call.positionals:
        kind_word, _, name = word.partition("/")
        kind = _kind(kind_word)
        obj = fake.get(kind, name, _ns(kind, call))
        if obj is not None:
            found.append(obj)
    if len(call.positionals) == 1:
        if found:
            out(json.dumps(found[0], indent=4) + "\n")
        return 0
    out(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "List",
                "items": found,
                "metadata": {"resourceVersion": ""},
            },
            indent=4,
        )
        + "\n"
    )
    return 0


def _delete(fake: FakeCluster, call: Call, out: Callable[[str], None]) -> int:
    """``delete KIND NAME`` with the flags the client always passes."""
    opts, names = call.options, call.positionals
    if len(names) != 2:
        raise Unsupported("delete KIND NAME")
    cascade = _need(call, "--cascade", "background", "foreground", "orphan")
    _need(call, "--output", "name")
    _need(call, "--wait", "false")
    if "--ignore-not-found" not in opts:
        raise Unsupported("delete without --ignore-not-found")
    kind = _kind(names[0])
    before = fake.get(kind, names[1], _ns(kind, call))
    mode = cast(Literal["background", "foreground", "orphan"], cascade)
    if fake.delete(kind, names[1], _ns(kind, call), cascade=mode) and before is not None:
        group = _group(str(before.get("apiVersion", "")))
        out(f"{kind.lower()}{'.' + group if group else ''}/{names[1]}\n")
    return 0


def _events(fake: FakeCluster, call: Call, out: Callable[[str], None]) -> int:
    if not call.namespace or set(call.options) - {"--output", "--field-selector"}:
        raise Unsupported("get events needs --namespace (and at most --field-selector)")
    sel = _selector(call.options["--field-selector"]) if "--field-selector" in call.options else {}
    if (
        set(sel) - {"involvedObject.kind", "involvedObject.name", "type"}
        or sel.get("type", "Warning") != "Warning"
    ):
        raise Unsupported(f"event field selector {sorted(sel.items())}")
    events = fake.events(
        call.namespace,
        sel.get("involvedObject.kind"),
        sel.get("involvedObject.name"),
        warnings="type" in sel,
    )
    items = [
        {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{e.name}.{i:016x}", "namespace": call.namespace},
            "involvedObject": {"kind": e.kind, "name": e.name, "namespace": call.namespace},
            "type": e.type,
            "reason": e.reason,
            "message": e.message,
            "count": e.count,
            "lastTimestamp": _timestamp(i),
        }
        for i, e in enumerate(events)
    ]
    out(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "List",
                "items": items,
                "metadata": {"resourceVersion": ""},
            },
            indent=4,
        )
        + "\n"
    )
    return 0


def _apply(fake: FakeCluster, call: Call, stdin: str, out: Callable[[str], None]) -> int:
    if "--server-side" not in call.options or call.positionals:
        raise Unsupported("apply other than --server-side --filename=-")
    _need(call, "--filename", "-")
    _need(call, "--output", "json")
    if "--dry-run" in call.options:
        _need(call, "--dry-run", "server")
    manager = call.options.get("--field-manager")
    if not manager:
        raise Unsupported("apply without --field-manager")
    try:
        manifest = json.loads(stdin)
    except ValueError as e:
        raise KubectlError(f"error: error parsing STDIN: {e}") from None
    dry = "--dry-run" in call.options
    if isinstance(manifest, dict) and manifest.get("kind") == "List" and dry:
        # deploy's server dry run sends its objects as one List. kubectl applies each
        # and prints what the server returned as a List; a refused object fails the call
        # (the client then asks each alone), which the first refusal here stands for.
        items = [_apply_one(fake, call, m, manager, dry) for m in manifest.get("items") or []]
        out(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "List",
                    "items": items,
                    "metadata": {"resourceVersion": ""},
                },
                indent=4,
            )
            + "\n"
        )
        return 0
    if not isinstance(manifest, dict) or manifest.get("kind") == "List":
        raise Unsupported("apply takes one object on stdin (a List only with --dry-run=server)")
    out(json.dumps(_apply_one(fake, call, manifest, manager, dry), indent=4) + "\n")
    return 0


def _apply_one(
    fake: FakeCluster, call: Call, manifest: dict[str, Any], manager: str, dry: bool
) -> dict[str, Any]:
    """One object server-side applied; what kubectl prints of it."""
    kind = str(manifest.get("kind", ""))
    name = str((manifest.get("metadata") or {}).get("name", ""))
    ns = _ns(kind, call)
    before = fake.get(kind, name, ns) if name and kind else None
    try:
        res = fake.apply(
            manifest,
            ns,
            field_manager=manager,
            force_conflicts="--force-conflicts" in call.options,
            dry_run=dry,
        )
    except Conflict as e:
        raise KubectlError(_conflict_text(e, str(manifest.get("apiVersion", "")))) from None
    if dry:  # the object as it would be: the live one, with the applied fields on top
        after: dict[str, Any] = dict(before or manifest)
        if res.action != "unchanged":
            after = {**after, **{k: v for k, v in manifest.items() if k != "metadata"}}
        return after
    return fake.get(kind, name, ns) or {}


def _create_reviews(fake: FakeCluster, call: Call, stdin: str, out: Callable[[str], None]) -> int:
    """``create --output=json --filename=-`` of SelfSubjectAccessReviews (one, or a List):
    each answered by the fake's ``can_i`` (the resource as ``RESOURCE.GROUP/NAME``) and
    printed as kubectl prints what it created, one JSON object after another."""
    if call.positionals or call.namespace:
        raise Unsupported("create takes no names and no namespace (the reviews are cluster-scoped)")
    _need(call, "--filename", "-")
    _need(call, "--output", "json")
    try:
        doc = json.loads(stdin)
    except ValueError as e:
        raise KubectlError(f"error: error parsing STDIN: {e}") from None
    items = doc.get("items") if isinstance(doc, dict) and doc.get("kind") == "List" else [doc]
    for item in items or []:
        attrs = ((item or {}).get("spec") or {}).get("resourceAttributes")
        if item.get("kind") != "SelfSubjectAccessReview" or not isinstance(attrs, dict):
            raise Unsupported(
                "create of anything but SelfSubjectAccessReviews with resourceAttributes"
            )
        resource = ".".join(p for p in (attrs.get("resource", ""), attrs.get("group", "")) if p)
        if attrs.get("name"):
            resource += f"/{attrs['name']}"
        allowed = fake.can_i(
            str(attrs.get("verb", "")),
            resource,
            attrs.get("namespace") or None,
            subresource=attrs.get("subresource") or None,
        )
        out(
            json.dumps(
                {**item, "metadata": {"creationTimestamp": None}, "status": {"allowed": allowed}},
                indent=4,
            )
            + "\n"
        )
    return 0


def _exec(fake: FakeCluster, call: Call, stdin: str, out: Callable[[str], None]) -> int:
    if len(call.positionals) != 1 or not call.namespace or not call.container_argv:
        raise Unsupported("exec --namespace=NS [-i] POD -- ARGV…")
    pod = call.positionals[0]
    try:
        res = fake.exec(
            pod,
            call.namespace,
            call.container_argv,
            stdin=stdin if "-i" in call.options else None,
            check=False,
        )
    except ExecTimeout:
        time.sleep(3600)  # a hanging command hangs: the client's timeout kills this process
        return 137
    out(res.stdout)
    if res.stderr:
        sys.stderr.write(res.stderr)
    return res.returncode


def _conflict_text(e: Conflict, api_version: str) -> str:
    """kubectl's report of a 409 from server-side apply: the API server's message
    (sigs.k8s.io/structured-merge-diff Conflicts.Error) and kubectl's advice."""
    if len(e.fields) == 1:
        path, mgr = e.fields[0]
        using = f" using {api_version}" if api_version else ""
        head = f'Apply failed with 1 conflict: conflict with "{mgr}"{using}: .{path}'
    else:
        by: dict[str, list[str]] = {}
        for path, mgr in e.fields:
            by.setdefault(mgr, []).append(path)
        head = f"Apply failed with {len(e.fields)} conflicts: " + "\n".join(
            f'conflicts with "{m}":\n' + "\n".join(f"- .{p}" for p in by[m]) for m in sorted(by)
        )
    return f"error: {head}\n{CONFLICT_ADVICE}"


def _status_error(e: ApiError) -> str:
    """How kubectl prints an API status error (staging/src/k8s.io/kubectl/pkg/cmd/util/
    helpers.go): ``Error from server (Reason): message``; a 422 as ``The Kind "name" is
    invalid: …``."""
    if isinstance(e, Invalid):
        return f'The {e.kind} "{e.name}" is invalid: {_after_invalid(str(e))}'
    reason = {NotFound: "NotFound", Forbidden: "Forbidden", Conflict: "Conflict"}.get(
        type(e), "InternalError"
    )
    if isinstance(e, NotFound) and "doesn't have a resource type" in str(e):
        return f"error: {e}"
    return f"Error from server ({reason}): {e}"


def _after_invalid(message: str) -> str:
    _, sep, rest = message.partition(" is invalid: ")
    return rest if sep else message


def _fail(message: str, code: int) -> NoReturn:
    sys.stderr.write(message.rstrip("\n") + "\n")
    raise SystemExit(code)


def _reads_stdin(call: Call) -> bool:
    """Whether kubectl reads stdin for this call (``-f -``, or ``exec -i``)."""
    return call.command in ("apply", "create") or "-i" in call.options


def answer(fake: FakeCluster, args: Sequence[str], stdin: str) -> tuple[int, str, str]:
    """What ``kubectl ARGS`` prints against ``fake``: (exit code, stdout, stderr). The fake
    is changed as the call changes it (the caller saves it). the deploy call-count
    test runs :class:`~mlenv.cluster.oc.OcCluster` through this in one process."""
    try:
        call = parse(args)
    except Unsupported as e:
        return UNSUPPORTED, "", f"fake kubectl: unsupported argv ({e}): {json.dumps(list(args))}\n"
    chunks: list[str] = []
    try:
        code = run(fake, call, stdin if _reads_stdin(call) else "", chunks.append)
    except Unsupported as e:
        return UNSUPPORTED, "", f"fake kubectl: unsupported argv ({e}): {json.dumps(list(args))}\n"
    except KubectlError as e:
        return 1, "", str(e).rstrip("\n") + "\n"
    except Unreachable as e:
        return 1, "", f"Unable to connect to the server: {e}\n"
    except ApiError as e:
        return 1, "", _status_error(e).rstrip("\n") + "\n"
    return code, "".join(chunks), ""


class InProcess(OcCluster):
    """The real client, each of its captured calls answered by :func:`answer` in this
    process (no kubectl, no Python start-up per call) and recorded in :attr:`calls` (the
    argv after the binary). Time is the fake's: its controllers run on :meth:`pause`. The
    streaming verbs (exec_stream, logs -f, rsync) are not wired: they start processes."""

    def __init__(self, fake: FakeCluster) -> None:
        super().__init__("kubectl")
        self.fake = fake
        self.calls: list[list[str]] = []

    def _call(  # type: ignore[override]
        self,
        line: Sequence[str],
        stdin: str | None,
        timeout: float,
    ) -> tuple[int, str, str, bool]:
        self.calls.append(list(line[1:]))
        rc, out, err = answer(self.fake, line[1:], stdin or "")
        return rc, out, err, False

    def monotonic(self) -> float:
        """The fake's clock."""
        return self.fake.monotonic()

    def pause(self, seconds: float) -> None:
        """The fake's controllers run instead of a sleep."""
        self.fake.pause(seconds)


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point: ``kubectl ARGS…`` against the fake saved in ``$FAKE_KUBECTL_STATE``."""
    args = list(sys.argv[1:] if argv is None else argv)
    path = os.environ.get(STATE_ENV, "")
    if not path or not os.path.isfile(path):
        _fail(f"fake kubectl: {STATE_ENV} does not name a fake-cluster state file", UNSUPPORTED)
    try:
        call = parse(args)
    except Unsupported as e:
        _fail(f"fake kubectl: unsupported argv ({e}): {json.dumps(args)}", UNSUPPORTED)
    stdin = sys.stdin.read() if _reads_stdin(call) else ""
    fake = FakeCluster.load(path)
    code, out, err = answer(fake, args, stdin)
    if code != UNSUPPORTED:
        fake.save(path)  # as before: an unsupported argv changed nothing
    sys.stdout.write(out)
    sys.stderr.write(err)
    raise SystemExit(code)


if __name__ == "__main__":
    main()
