"""Shell completion of option and argument values: what `mlenv completion bash`
completes after a verb, by the parameter's name on any verb.

Each completer takes the word typed so far and returns the candidates; none may fail
(a completion that raises prints a traceback into the user's prompt), so every reader
here swallows what it cannot read and returns fewer candidates.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any


def _root() -> Path:
    from mlenv.cli._common import repo_root

    return Path(repo_root())


def cluster_names(incomplete: str) -> list[str]:
    """The names in ``clusters/``; nothing for a word that looks like a path, so the shell
    completes file names instead."""
    if "/" in incomplete or incomplete.startswith("."):
        return []
    names = sorted(p.stem for p in (_root() / "clusters").glob("*.yaml"))
    return [n for n in names if n.startswith(incomplete)]


def modes(incomplete: str) -> list[str]:
    """rdma, tcp."""
    from mlenv.cli._clusterctx import MODES

    return [m for m in MODES if m.startswith(incomplete)]


def profile_names(incomplete: str) -> list[str]:
    """The acceptance profiles (quick, full)."""
    from mlenv.acceptance.core.profiles import profile_names as names

    return [p for p in names() if p.startswith(incomplete)]


def check_names(incomplete: str) -> list[str]:
    """Check names and families for ``--checks``, a comma list: the last item completes,
    the ones before it are kept and not offered again."""
    try:
        from mlenv.acceptance.core.registry import load, order_key, registry

        load()
        names = sorted(registry(), key=order_key)
    except Exception:  # a broken plugin module: complete nothing rather than fail
        return []
    families = sorted({n.split(".", 1)[0] for n in names} - set(names), key=order_key)
    done, sep, last = incomplete.rpartition(",")
    chosen = set(done.split(",")) if sep else set()
    return [
        f"{done}{sep}{n}" for n in [*families, *names] if n.startswith(last) and n not in chosen
    ]


def run_ids(incomplete: str) -> list[str]:
    """Run ids in the history (every cluster's, newest first); nothing for a path, which
    the shell completes itself (a report folder, results.json or a bundle)."""
    if "/" in incomplete or incomplete.startswith("."):
        return []
    try:
        from mlenv.acceptance.records import history

        root = history.default_root(str(_root()))
        records = [
            r for f in sorted(root.glob(f"*/{history.HISTORY_FILE}")) for r in history.read(f)[0]
        ]
        ids = [str(r.get("run_id")) for r in history.newest_first(records) if r.get("run_id")]
    except Exception:  # an unreadable history: no candidates, never a traceback
        return []
    return [i for i in dict.fromkeys(ids) if i.startswith(incomplete)]


def output_formats(incomplete: str) -> list[str]:
    """-o/--output: table, json, yaml (a verb that prints no table refuses it by name)."""
    return [f for f in ("table", "json", "yaml") if f.startswith(incomplete)]


def dev_tools(incomplete: str) -> list[str]:
    """`url CLUSTER TOOL`: vscode, jupyter, tensorboard."""
    from mlenv.render.workload import DEV_TOOLS

    return [t for t in DEV_TOOLS if t.startswith(incomplete)]


def verbs(ctx: Any, incomplete: str) -> list[str]:
    """`help VERB`: the verbs, as `mlenv --help` lists them (from the running command's
    root: importing the app here would make an import cycle)."""
    try:
        names = list(ctx.find_root().command.commands)
    except Exception:  # never a traceback in the prompt
        return []
    return [v for v in names if v.startswith(incomplete)]


def shells(incomplete: str) -> list[str]:
    """`completion SHELL`."""
    from mlenv.cli.cmd_help import SHELLS

    return [s for s in SHELLS if s.startswith(incomplete)]


def bundle_targets(incomplete: str) -> list[str]:
    """`bundle RUN_ID|RUN_DIR|verify`: run ids and the word verify (folders: the shell's)."""
    extra = ["verify"] if "verify".startswith(incomplete) else []
    return [*run_ids(incomplete), *extra]


# parameter name (on any verb) → what completes its value
# (Typer passes a completer the arguments its signature names: incomplete, and ctx)
BY_PARAMETER: dict[str, Callable[..., list[str]]] = {
    "cluster": cluster_names,
    "mode": modes,
    "profile": profile_names,
    "checks": check_names,
    "run_a": run_ids,  # compare
    "run_b": run_ids,
    "run_ref": run_ids,  # quarantine, release, recheck
    "after": run_ids,  # release --after
    "output": output_formats,
    "tool": dev_tools,  # url
    "verb": verbs,  # help
    "shell": shells,  # completion
    "target": bundle_targets,  # bundle
}
