"""Global options, kubectl style: ``-n/--namespace``, ``--context``, ``--kubeconfig``,
``--request-timeout`` on every cluster verb, ``-q/--quiet`` and ``-v/--verbose`` on every
verb, accepted before the verb (``mlenv -n team-b status x``) and after it
(``mlenv status x -n team-b``, as kubectl users type them; after the verb wins).

They are defined once here and added to each verb's signature when the app is built
(:func:`with_globals`), so a verb module added later gets them without repeating them.
The values land in :data:`mlenv.cli._common.SETTINGS`; they are validated where they are
used (inside the verb's error boundary): the namespace as a DNS-1123 label, the context
and kubeconfig by :mod:`mlenv.argv`.
"""

from __future__ import annotations

import copy
import functools
import inspect
from collections.abc import Callable
from typing import Annotated, Any

import typer

from mlenv.cli._common import SETTINGS

# The verbs that talk to a cluster (they take --namespace/--context/--kubeconfig and probe
# the API server first, see mlenv.cli._clusterctx.cluster_client).
CLUSTER_VERBS = frozenset(
    {
        "deploy",
        "status",
        "sync",
        "shell",
        "logs",
        "port-forward",
        "launch",
        "teardown",
        "build",
        "url",
        "gpu-info",
        "discover",
        "history",  # --fetch reads pod-0's results folder
    }
)

NamespaceOpt = Annotated[
    str | None,
    typer.Option(
        "--namespace", "-n", help="Namespace to use instead of the config's cluster.namespace."
    ),
]
ContextOpt = Annotated[
    str | None,
    typer.Option("--context", help="kubeconfig context to use (default: the current context)."),
]
KubeconfigOpt = Annotated[
    str | None,
    typer.Option(
        "--kubeconfig", help="kubeconfig file (default: KUBECONFIG, else ~/.kube/config)."
    ),
]
TimeoutOpt = Annotated[
    float | None,
    typer.Option(
        "--request-timeout",
        help="Seconds the API server has to answer (default: MLENV_API_TIMEOUT_S, else 10).",
    ),
]
QuietOpt = Annotated[
    bool, typer.Option("--quiet", "-q", help="Only results, warnings and errors on the terminal.")
]
VerboseOpt = Annotated[
    bool, typer.Option("--verbose", "-v", help="Also show each oc/kubectl command line run.")
]

# parameter name → (annotation, Settings field, cluster verbs only)
_OPTIONS: dict[str, tuple[Any, str, bool]] = {
    "g_namespace": (NamespaceOpt, "namespace", True),
    "g_context": (ContextOpt, "context", True),
    "g_kubeconfig": (KubeconfigOpt, "kubeconfig", True),
    "g_request_timeout": (TimeoutOpt, "request_timeout", True),
    "g_quiet": (QuietOpt, "quiet", False),
    "g_verbose": (VerboseOpt, "verbose", False),
}


def reset(**values: Any) -> None:
    """Start a command: every setting from the root options (or its default)."""
    for f in ("namespace", "context", "kubeconfig", "request_timeout"):
        setattr(SETTINGS, f, values.get(f))
    SETTINGS.quiet = bool(values.get("quiet"))
    SETTINGS.verbose = bool(values.get("verbose"))


def _option_strings(p: inspect.Parameter) -> list[str]:
    """The option strings (``--namespace``, ``-n``) a typer parameter declares; a verb's
    own option keeps its spelling and meaning, the global one of that spelling is left out."""
    from typing import get_args, get_origin

    from typer.models import OptionInfo

    if get_origin(p.annotation) is not Annotated:
        return []
    infos = [e for e in get_args(p.annotation)[1:] if isinstance(e, OptionInfo)]
    if not infos:
        return []
    info = infos[0]
    decls = [
        d
        for d in (info.default, *(info.param_decls or ()))
        if isinstance(d, str) and d.startswith("-")
    ]
    return decls or [f"--{p.name.replace('_', '-')}"]


def _complete_values(p: inspect.Parameter) -> inspect.Parameter:
    """A parameter without a completion of its own completes as its name says
    (``mlenv.cli._complete.BY_PARAMETER``: cluster names, modes, profiles, checks, run ids)."""
    from typing import get_args, get_origin

    from typer.models import ParameterInfo

    from mlenv.cli._complete import BY_PARAMETER

    if p.name not in BY_PARAMETER or get_origin(p.annotation) is not Annotated:
        return p
    base, *extras = get_args(p.annotation)
    infos = [e for e in extras if isinstance(e, ParameterInfo)]
    if len(infos) != 1 or infos[0].autocompletion is not None or infos[0].shell_complete:
        return p
    info = copy.copy(infos[0])
    info.autocompletion = BY_PARAMETER[p.name]
    new = [info if e is infos[0] else e for e in extras]
    return p.replace(annotation=Annotated[(base, *new)])


def with_globals(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` with the global options appended to its signature; given after the verb,
    they override the root's."""
    sig = inspect.signature(fn, eval_str=True)
    taken = {d for p in sig.parameters.values() for d in _option_strings(p)}
    wanted = {
        k: v
        for k, v in _OPTIONS.items()
        if (name in CLUSTER_VERBS or not v[2])
        # a verb's own option of that spelling keeps its meaning (discover -n)
        and not taken
        & set(
            _option_strings(inspect.Parameter(k, inspect.Parameter.KEYWORD_ONLY, annotation=v[0]))
        )
    }
    if any(k in sig.parameters for k in wanted):  # already wrapped
        return fn
    extra = [
        inspect.Parameter(
            k,
            inspect.Parameter.KEYWORD_ONLY,
            annotation=ann,
            default=False if field in ("quiet", "verbose") else None,
        )
        for k, (ann, field, _) in wanted.items()
    ]

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        for k in wanted:
            value = kwargs.pop(k, None)
            if value is not None and value is not False:
                setattr(SETTINGS, _OPTIONS[k][1], value)
        return fn(*args, **kwargs)

    params = [_complete_values(p) for p in sig.parameters.values()]
    wrapper.__signature__ = sig.replace(parameters=[*params, *extra])  # type: ignore[attr-defined]
    wrapper.__annotations__ = {
        **{p.name: p.annotation for p in params},
        **{p.name: p.annotation for p in extra},
        **(
            {"return": sig.return_annotation}
            if sig.return_annotation is not inspect.Signature.empty
            else {}
        ),
    }
    return wrapper
