"""The one builder of argument lists that reach ``oc``/``kubectl`` (and later ssh/sbatch).

No value from a config, a CLI argument or a file name may become an option or code. Two
rules make that impossible rather than unlikely:

1. Every name is validated for its kind before it is placed in an argv
   (:func:`name`): Kubernetes names are DNS-1123 subdomains or labels, so nothing that
   starts with ``-`` or holds a space, quote, ``$``, ``;`` or newline can pass.
2. Positional names go after ``--`` (:func:`kube`), so even a name that slipped past (1)
   is a name to ``kubectl``/``oc``, never a flag such as ``--kubeconfig=FILE`` (whose exec
   plugin would run any command on the operator's machine).

``exec`` is the one verb where ``--`` cannot protect the pod name: kubectl's first ``--``
starts the container's command. There the pod name is validated (rule 1) and stands
before the ``--`` (:func:`kube_exec`).

Stdlib only: the pod runtime and the Slurm/hosts paths import it too.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

from mlenv.errors import InputError

_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
# Resource words as `kubectl get` takes them: Kind, plural, kind.group, group/version forms.
_RESOURCE = re.compile(
    r"[A-Za-z][A-Za-z0-9]*(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
    r"(/[A-Za-z0-9][A-Za-z0-9.:-]*)?"
)
# Label keys: optional DNS-subdomain prefix + "/" + name of [A-Za-z0-9._-], 63 at most.
_LABEL_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
# Service-account user names for `auth can-i --as=`.
_SA_USER = re.compile(r"system:serviceaccount:[a-z0-9][-a-z0-9]*:[a-z0-9][-a-z0-9.]*")
_VERB = re.compile(r"\*|[a-z]+(-[a-z]+)*")
_COMMAND_WORD = re.compile(r"[a-z]+(-[a-z]+)*")

# Kinds whose names are DNS-1123 labels (63 chars); every other kind: subdomain (253).
LABEL_KINDS = frozenset({"namespace", "service", "route", "statefulset", "container"})


class UnsafeArgument(InputError):
    """A value would not be a plain name on a command line (exit 2)."""


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def name(kind: str, value: str) -> str:
    """``value`` if it is a valid Kubernetes name for ``kind``; UnsafeArgument otherwise."""
    k = kind.lower().rsplit(".", 1)[0] if "." in kind else kind.lower()
    if not isinstance(value, str) or not value:
        raise UnsafeArgument(f"{kind} name {_show(value)}: expected a non-empty name")
    if k in LABEL_KINDS:
        ok, rule, limit = _LABEL.fullmatch(value), "a DNS-1123 label", 63
    else:
        ok, rule, limit = _SUBDOMAIN.fullmatch(value), "a DNS-1123 subdomain", 253
    if not ok or len(value) > limit:
        raise UnsafeArgument(
            f"{kind} name {_show(value)} is not {rule} (lower-case letters, digits, '-'"
            f"{'' if k in LABEL_KINDS else ', ' + repr('.')}; at most {limit} characters; "
            "starting and ending with a letter or digit): refused before it reaches a "
            "command line"
        )
    return value


def resource(word: str) -> str:
    """A resource word (``StorageClass``, ``pods``, ``rolebindings.rbac.authorization.k8s.io``)."""
    if not isinstance(word, str) or not _RESOURCE.fullmatch(word) or len(word) > 253:
        raise UnsafeArgument(f"resource type {_show(word)} is not a Kubernetes resource name")
    return word


def verb(word: str) -> str:
    """An RBAC verb for ``auth can-i`` (``get``, ``create``, ``use``, ``*``)."""
    if not isinstance(word, str) or not _VERB.fullmatch(word) or len(word) > 63:
        raise UnsafeArgument(f"RBAC verb {_show(word)} is not a plain verb")
    return word


def user(value: str) -> str:
    """A service-account user for ``--as=`` (``system:serviceaccount:NS:NAME``)."""
    if not isinstance(value, str) or not _SA_USER.fullmatch(value) or len(value) > 400:
        raise UnsafeArgument(f"--as user {_show(value)} is not system:serviceaccount:NS:NAME")
    return value


def label_key(key: str) -> str:
    """A label key: ``[prefix/]name`` by the Kubernetes rules."""
    prefix, _, nm = key.rpartition("/") if isinstance(key, str) else ("", "", "")
    if (
        not nm
        or len(nm) > 63
        or not _LABEL_NAME.fullmatch(nm)
        or (prefix and (len(prefix) > 253 or not _SUBDOMAIN.fullmatch(prefix)))
    ):
        raise UnsafeArgument(f"label key {_show(key)} is not [prefix/]name")
    return key


def label_value(value: str) -> str:
    """A label value: empty, or up to 63 of ``[A-Za-z0-9._-]`` starting and ending alphanumeric."""
    if (
        not isinstance(value, str)
        or len(value) > 63
        or (value and not _LABEL_NAME.fullmatch(value))
    ):
        raise UnsafeArgument(f"label value {_show(value)} is not a valid label value")
    return value


def selector(labels: Mapping[str, str]) -> str:
    """``k=v,k2=v2`` for ``-l``, every key and value validated (sorted: stable argv)."""
    return ",".join(f"{label_key(k)}={label_value(v)}" for k, v in sorted(labels.items()))


def selector_in(key: str, values: Sequence[str]) -> str:
    """``key in (v1,v2,…)`` for ``-l``: the key and every value validated as a label's."""
    if not values:
        raise UnsafeArgument(f"selector {_show(key)} in (): expected one value or more")
    return f"{label_key(key)} in ({','.join(label_value(v) for v in values)})"


def field_selector(pairs: Mapping[str, str]) -> str:
    """``involvedObject.kind=Pod,…`` for ``--field-selector``; values are names or kinds."""
    out = []
    for k, v in sorted(pairs.items()):
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9.]*", k):
            raise UnsafeArgument(f"field selector key {_show(k)} is not a field path")
        if not re.fullmatch(r"[A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?", v):
            raise UnsafeArgument(f"field selector value {_show(v)} is not a plain name")
        out.append(f"{k}={v}")
    return ",".join(out)


def port_pair(local: int, remote: int) -> str:
    """``LOCAL:REMOTE`` for port-forward, both real port numbers."""
    for p in (local, remote):
        if isinstance(p, bool) or not isinstance(p, int) or not 0 < p < 65536:
            raise UnsafeArgument(f"port {_show(p)} is not a port number (1-65535)")
    return f"{local}:{remote}"


def abs_path(value: str, what: str = "path") -> str:
    """An absolute POSIX path in a pod, without control characters or ``..`` segments."""
    if (
        not isinstance(value, str)
        or not value.startswith("/")
        or "\x00" in value
        or any(ord(c) < 32 or ord(c) == 127 for c in value)
        or ".." in value.split("/")
    ):
        raise UnsafeArgument(
            f"{what} {_show(value)} is not an absolute path without '..' or control characters"
        )
    return value


def options_before(args: Iterable[str]) -> list[str]:
    """Options as given, checked to be options (``-x`` / ``--x[=v]``): the caller's own
    constants, never user values, so a mistake here is a programming error."""
    out = list(args)
    for a in out:
        if not a.startswith("-") or a == "--":
            raise ValueError(f"not an option: {a!r} (positionals go after '--')")
    return out


def kube(command: str, options: Sequence[str], positionals: Sequence[str] = ()) -> list[str]:
    """``COMMAND… OPTIONS… -- POSITIONALS…`` (the binary and any namespace come from the caller).

    Options are the code's own constants (or built by the validators above); positionals
    are validated names. ``--`` makes kubectl/oc read every positional as a name even if
    a validator were ever loosened.

    ``command`` is a command path: one word (``get``) or a verb and its subcommand
    (``auth can-i``, ``auth whoami``, ``config view``). The subcommand must stand before
    ``--``: cobra (kubectl's and oc's parser) looks for subcommand words only up to
    ``--``, so ``auth -- can-i …`` would run ``auth`` itself ("unknown command").
    """
    words = command.split()
    if not words or not all(_COMMAND_WORD.fullmatch(w) for w in words):
        raise ValueError(f"not a command path: {command!r}")
    return [*words, *options_before(options), *(["--", *positionals] if positionals else [])]


def kube_exec(pod: str, command: Sequence[str], options: Sequence[str] = ()) -> list[str]:
    """``exec OPTIONS… POD -- COMMAND…``: kubectl's first ``--`` starts the command, so the
    pod name stands before it, validated."""
    return ["exec", *options_before(options), name("Pod", pod), "--", *command]


# -- client-wide flags (kubectl habits) -------------------------------------------
# kubeconfig context names are free-form in the file; what `oc login` writes looks like
# `team-a/api-x-example-com:6443/alice`. Allowed: letters, digits and . _ : / @ + = -,
# never a leading '-', at most 253 characters.
_CONTEXT = re.compile(r"[A-Za-z0-9_.:/@+=][A-Za-z0-9_.:/@+=-]*")


def context_name(value: str) -> str:
    """A kubeconfig context name for ``--context=`` (no option shape, no spaces or
    control characters)."""
    if not isinstance(value, str) or len(value) > 253 or not _CONTEXT.fullmatch(value):
        raise UnsafeArgument(
            f"--context {_show(value)} is not a kubeconfig context name "
            "(letters, digits and . _ : / @ + = -, not starting with '-')"
        )
    return value


def local_path(value: str, what: str = "path") -> str:
    """A local file path for an ``--opt=PATH`` flag: non-empty, no control characters, not
    option-shaped (a leading ``-`` is refused even though ``=`` would keep it a value)."""
    if (
        not isinstance(value, str)
        or not value
        or value.startswith("-")
        or len(value) > 4096
        or any(ord(c) < 32 or ord(c) == 127 for c in value)
    ):
        raise UnsafeArgument(
            f"{what} {_show(value)} is not a plain file path (empty, starts "
            "with '-' or holds control characters)"
        )
    return value


def request_timeout(seconds: float) -> str:
    """``--request-timeout=…`` for a limit in seconds (kubectl takes a Go duration; whole
    milliseconds keep fractions such as 2.5 s exact)."""
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, (int, float))
        or not 0 < seconds < 86400
        or seconds != seconds
    ):
        raise UnsafeArgument(
            f"request timeout {_show(seconds)} is not a number of seconds between 0 and 86400"
        )
    return f"--request-timeout={max(1, round(seconds * 1000))}ms"


def client_flags(kubeconfig: str | None = None, context: str | None = None) -> list[str]:
    """The flags every ``oc``/``kubectl`` call of one command carries (``--kubeconfig``,
    ``--context``), validated, in ``--flag=VALUE`` form so a value is never read as a flag."""
    out = []
    if kubeconfig:
        out.append(f"--kubeconfig={local_path(kubeconfig, '--kubeconfig')}")
    if context:
        out.append(f"--context={context_name(context)}")
    return out


def count(value: int, what: str = "count") -> int:
    """A non-negative whole number for a numeric flag (``--tail=N``)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise UnsafeArgument(f"{what} {_show(value)} is not a whole number of 0 or more")
    return value


# -- Slurm and plain hosts ---------------------------------------------------
# Slurm's tools parse options with getopt_long, which ends them at '--' too; the values
# they carry are validated per kind first, as for kubectl.
SLURM_COMMANDS = frozenset(
    {"sbatch", "squeue", "sacct", "sacctmgr", "scancel", "scontrol", "sinfo", "srun"}
)
_SLURM_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
# Accounts may carry '@' (IDRIS Jean Zay: ``xyz@a100``, ``xyz@v100``): the project and the
# hours' kind in one Slurm account name.
_SLURM_ACCOUNT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.@-]{0,63}")
_SLURM_NODE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,252})")
_JOB_ID = re.compile(r"[0-9]{1,12}")
_SSH_USER = re.compile(r"[a-z_][a-z0-9_-]{0,31}")


def slurm_name(value: str, what: str = "Slurm name") -> str:
    """A partition, account, QOS or job name: letters, digits, ``_ . -``, not starting with ``-``."""
    if not isinstance(value, str) or not _SLURM_NAME.fullmatch(value):
        raise UnsafeArgument(
            f"{what} {_show(value)} is not a plain Slurm name (letters, digits, "
            "'_', '.', '-', not starting with '-')"
        )
    return value


def slurm_account(value: str) -> str:
    """An account: a plain Slurm name that may also hold ``@`` (``xyz@a100``)."""
    if not isinstance(value, str) or not _SLURM_ACCOUNT.fullmatch(value):
        raise UnsafeArgument(
            f"account {_show(value)} is not a Slurm account name (letters, digits, "
            "'_', '.', '@', '-', not starting with '-' or '@')"
        )
    return value


def slurm_node(value: str) -> str:
    """A node (host) name as Slurm and ssh take it."""
    if not isinstance(value, str) or not _SLURM_NODE.fullmatch(value):
        raise UnsafeArgument(
            f"node name {_show(value)} is not a host name (letters, digits, '-', "
            "'_', '.', not starting with '-')"
        )
    return value


def slurm_partitions(value: str) -> str:
    """One partition or a comma list of them (``gpu-a100,gpu-h100``): sbatch submits to
    whichever can start the job first. Each is a plain Slurm name."""
    parts = value.split(",") if isinstance(value, str) else [value]
    for p in parts:
        slurm_name(p, "partition")
    return value


# A Slurm --constraint expression (sbatch(1)): features joined by '&' (and), '|' (or),
# ',' (and, old form), optionally with a count ('*2'), grouped by [...] (matching OR: all
# nodes get the same one) or (...). The tokens below are all the characters it may hold.
_FEATURE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:=-]{0,63}(\*[0-9]{1,4})?")
_CONSTRAINT_TOKEN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:=-]*(?:\*[0-9]+)?|[&|,\[\]()]")


def constraint_tokens(value: str) -> list[str]:
    """The tokens of a :func:`slurm_constraint`-valid expression (features, ``& | , [ ] ( )``)."""
    return _CONSTRAINT_TOKEN.findall(slurm_constraint(value))


def slurm_constraint(value: str) -> str:
    """A ``--constraint`` expression (``a100_80g&ib_hdr``, ``[rack1|rack2]``, ``(a|b)&c``).

    Parsed, not pattern-matched: operands and operators alternate, brackets balance and
    nest as Slurm allows (no brackets inside ``[...]``). UnsafeArgument otherwise."""

    def bad(why: str) -> UnsafeArgument:
        return UnsafeArgument(
            f"constraint {_show(value)} is not a Slurm constraint expression ({why}; "
            "features of letters, digits, '_', '.', ':', '=', '-' joined by '&', '|' "
            "or ',', grouped by [...] or (...))"
        )

    if not isinstance(value, str) or not value or len(value) > 1024:
        raise bad("empty or too long")
    pos, tokens = 0, []
    while pos < len(value):
        m = _CONSTRAINT_TOKEN.match(value, pos)
        if not m:
            raise bad(f"unexpected {value[pos]!r}")
        tokens.append(m.group(0))
        pos = m.end()
    stack: list[str] = []
    want_operand = True
    for t in tokens:
        if t in "[(":
            if not want_operand or (t == "[" and "[" in stack):
                raise bad(f"misplaced {t!r}")
            stack.append(t)
        elif t in "])":
            if want_operand or not stack or stack.pop() != {"]": "[", ")": "("}[t]:
                raise bad(f"unbalanced {t!r}")
        elif t in "&|,":
            if want_operand:
                raise bad(f"misplaced {t!r}")
            want_operand = True
        else:
            if not want_operand or not _FEATURE.fullmatch(t):
                raise bad(f"misplaced or invalid feature {t!r}")
            want_operand = False
    if want_operand or stack:
        raise bad("incomplete")
    return value


# sbatch long options a site may add through slurm.sbatch_args: value → takes "=VALUE",
# flag → takes none. Options that other keys set, that change where the job's files go or
# whose environment it gets (--export, --chdir, --output), that hold or requeue it, or that
# send it to another cluster are not here: mlenv could no longer follow or judge the job.
SBATCH_OPTIONS: dict[str, str] = {
    **dict.fromkeys(
        (
            "mem",
            "mem-per-cpu",
            "mem-per-gpu",
            "cpus-per-task",
            "cpus-per-gpu",
            "gpus-per-task",
            "gpu-bind",
            "gpu-freq",
            "cpu-freq",
            "comment",
            "gres",
            "gres-flags",
            "network",
            "licenses",
            "mail-type",
            "mail-user",
            "time-min",
            "begin",
            "deadline",
            "hint",
            "distribution",
            "threads-per-core",
            "cores-per-socket",
            "sockets-per-node",
            "ntasks-per-core",
            "ntasks-per-socket",
            "switches",
            "exclude",
            "prefer",
            "wckey",
            "mcs-label",
            "tmp",
            "mincpus",
            "core-spec",
            "thread-spec",
            "acctg-freq",
            "profile",
            "nice",
            "priority",
            "cluster-constraint",
            "mem-bind",
            "power",
            "tres-per-task",
            "delay-boot",
            "extra",
            # CSCS Alps: the Container Engine's environment definition file (a name or a
            # path to its .toml) and user environments (uenv image, and its view)
            "environment",
            "uenv",
            "view",
        ),
        "value",
    ),
    **dict.fromkeys(
        ("overcommit", "spread-job", "use-min-nodes", "contiguous", "oversubscribe"), "flag"
    ),
}
# Options other keys own: the key to set instead.
SBATCH_OWNED = {
    "partition": "slurm.partition",
    "account": "slurm.account",
    "qos": "slurm.qos",
    "constraint": "slurm.constraint",
    "reservation": "slurm.reservation",
    "time": "slurm.time_limit",
    "exclusive": "slurm.exclusive",
    "nodes": "gpus.default_nodes (or --nodes)",
    "nodelist": "nodes.gpu_nodes",
    "gpus-per-node": "slurm.gpus_flag",
    "gpus": "slurm.gpus_flag",
    "job-name": "(mlenv names the job)",
    "output": "(reports go to slurm.shared_dir)",
    "error": "(reports go to slurm.shared_dir)",
    "ntasks-per-node": "(one task per node starts the ranks)",
    "signal": "(mlenv sets it)",
    "container-image": "slurm.container.image",
    "container-mounts": "slurm.container.mounts",
    "container-writable": "slurm.container.writable",
    "no-container-mount-home": "slurm.container.mount_home",
    "container-mount-home": "slurm.container.mount_home",
    "container-env": "slurm.container.env",
    "container-name": "slurm.container.name",
    "container-workdir": "(mlenv runs in slurm.shared_dir)",
}
# A value as sbatch reads it from a '#SBATCH' line: no quote, backslash, '#', '$', '`',
# ';', '<', '>', '!' or control character; spaces only inside (one quoted word).
_SBATCH_VALUE = re.compile(r"[A-Za-z0-9_.,:=@+/%*&|()\[\]~][A-Za-z0-9_.,:=@+/%*&|()\[\]~ -]{0,255}")


def sbatch_option(arg: str) -> str:
    """One ``--option[=value]`` of ``slurm.sbatch_args``: an option of :data:`SBATCH_OPTIONS`
    with a plain value. UnsafeArgument (saying what is allowed) otherwise."""
    if not isinstance(arg, str) or not arg.startswith("--"):
        raise UnsafeArgument(
            f"sbatch argument {_show(arg)} is not a long option '--option[=value]'"
        )
    opt, eq, val = arg[2:].partition("=")
    if opt in SBATCH_OWNED:
        raise UnsafeArgument(
            f"sbatch option --{opt} is set by mlenv from {SBATCH_OWNED[opt]}, not through "
            "sbatch_args"
        )
    kind = SBATCH_OPTIONS.get(opt)
    if kind is None:
        raise UnsafeArgument(
            f"sbatch option {_show('--' + opt)} is not one mlenv passes through (allowed: "
            + ", ".join(sorted(SBATCH_OPTIONS))
            + ")"
        )
    if kind == "flag" and eq:
        raise UnsafeArgument(f"sbatch option --{opt} takes no value")
    if kind == "value" and not eq:
        raise UnsafeArgument(f"sbatch option --{opt} needs a value (--{opt}=VALUE)")
    if eq and (not _SBATCH_VALUE.fullmatch(val) or val != val.strip()):
        raise UnsafeArgument(
            f"sbatch option --{opt}: value {_show(val)} is not plain (letters, digits, "
            "spaces inside, and _ . , : = @ + / % * & | ( ) [ ] ~ -; no quotes, '#', '$' or "
            "control characters)"
        )
    return arg


def job_id(value: str | int) -> str:
    """A Slurm job id (digits only)."""
    text = str(value) if isinstance(value, int) and not isinstance(value, bool) else value
    if not isinstance(text, str) or not _JOB_ID.fullmatch(text):
        raise UnsafeArgument(f"Slurm job id {_show(value)} is not a number")
    return text


# The text of a quarantine note: a Kubernetes annotation value and a Slurm
# drain Reason. "mlenv <run-id>: <check> <figure>": letters, digits and the punctuation a
# figure needs; never a quote, $, `, backslash, newline or a leading '-'.
_NOTE = re.compile(r"[A-Za-z0-9_.,:;%=<>()+/*][A-Za-z0-9 _.,:;%=<>()+/*-]{0,255}")
_NOTE_DROP = re.compile(r"[^A-Za-z0-9 _.,:;%=<>()+/*-]")


def note_text(text: str) -> str:
    """``text`` made fit for :func:`note`: other characters become ``_``, one line, 200 at most."""
    # an apostrophe ("its peers' median") is dropped, not replaced: the printed command
    # stays one simply quoted word
    clean = (
        _NOTE_DROP.sub("_", " ".join(str(text).replace("'", "").split()))[:200].strip().lstrip("-")
    )
    return clean or "_"


def note(text: str) -> str:
    """A quarantine note (annotation value, drain reason), validated."""
    if not isinstance(text, str) or not _NOTE.fullmatch(text):
        raise UnsafeArgument(
            f"note {_show(text)} holds characters outside letters, digits and _ . , : ; % = < > ( ) "
            "+ / * - (or starts with '-' or a space)"
        )
    return text


def slurm(command: str, options: Sequence[str] = (), positionals: Sequence[str] = ()) -> list[str]:
    """``COMMAND OPTIONS… -- POSITIONALS…`` for a Slurm client (``sbatch``, ``squeue``, …).

    Options are the code's own ``--flag=VALUE`` words (values from the validators above);
    positionals (a job id, a script path and its arguments, scontrol's words) stand after
    ``--``, so none can be read as an option.
    """
    if command not in SLURM_COMMANDS:
        raise ValueError(f"not a Slurm command: {command!r}")
    return [command, *options_before(options), *(["--", *positionals] if positionals else [])]


def ssh_user(value: str) -> str:
    """A login name for ``ssh -l``."""
    if not isinstance(value, str) or not _SSH_USER.fullmatch(value):
        raise UnsafeArgument(f"ssh user {_show(value)} is not a user name")
    return value


def ssh(
    host: str,
    remote: Sequence[str],
    *,
    user: str = "",
    port: int = 22,
    key: str = "",
    options: Sequence[str] = (),
    config: str = "",
    log: str = "",
) -> list[str]:
    """``ssh OPTIONS… -p PORT [-F CONFIG] [-l USER] [-i KEY] [-E LOG] -- HOST REMOTE…``, host validated.

    ssh joins the remote words with spaces into one shell command line on the host, so
    each word is shell-quoted here: a remote argument stays one argument there.
    """
    import shlex

    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise UnsafeArgument(f"ssh port {_show(port)} is not a port number (1-65535)")
    argv = ["ssh", *options_before(options), "-p", str(port)]
    if config:
        argv += ["-F", local_path(config, "ssh config")]
    if user:
        argv += ["-l", ssh_user(user)]
    if key:
        argv += ["-i", local_path(key, "ssh key")]
    if log:  # ssh's own messages (connect and auth failures) to this file instead of stderr
        argv += ["-E", local_path(log, "ssh log")]
    return [*argv, "--", slurm_node(host), *(shlex.quote(w) for w in remote)]
