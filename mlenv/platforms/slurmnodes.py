"""Draining and resuming Slurm nodes for ``mlenv quarantine`` / ``mlenv release``.

The argv comes from :func:`mlenv.argv.slurm` (values after ``--``, the node a validated
host name, the reason a validated note), the same lists printed in a dry run and run by
``--apply``. A node is resumed only when its drain reason is the one this run set
(``mlenv <run-id>: …``): a node an operator drained for another reason is left alone.
"""

from __future__ import annotations

import os
import pwd
import shlex
from typing import TYPE_CHECKING

from mlenv import argv
from mlenv.errors import InfraError
from mlenv.platforms.slurm import _check, _run, nodes_info
from mlenv.quarantine import OneByOne

if TYPE_CHECKING:
    from mlenv.quarantine import Target


def drain_argv(node: str, reason: str) -> list[str]:
    """``scontrol -- update NodeName=X State=DRAIN Reason=<reason>``."""
    return argv.slurm(
        "scontrol",
        [],
        [
            "update",
            f"NodeName={argv.slurm_node(node)}",
            "State=DRAIN",
            f"Reason={argv.note(reason)}",
        ],
    )


def resume_argv(node: str) -> list[str]:
    """``scontrol -- update NodeName=X State=RESUME`` (undoes a drain)."""
    return argv.slurm(
        "scontrol", [], ["update", f"NodeName={argv.slurm_node(node)}", "State=RESUME"]
    )


def shell_line(words: list[str]) -> str:
    """An argv as an operator types it."""
    return shlex.join(words)


def node_state(node: str) -> tuple[str, str] | None:
    """(State, Reason) of a node as ``scontrol show node`` says, None when Slurm does not know it."""
    rec = nodes_info([node]).get(node)
    if rec is None:
        return None
    return rec.get("State", ""), rec.get("Reason", "")


def drained(state: str) -> bool:
    """Whether a State word says the node is drained or draining."""
    return "DRAIN" in state.upper()


def ours(reason: str, run_id: str) -> bool:
    """Whether a drain reason is this run's (Slurm may append ``[user@time]``)."""
    return reason.startswith(f"mlenv {run_id}:")


def run(words: list[str]) -> None:
    """Run one scontrol argv; InfraError (exit 3) naming scontrol's complaint when it fails."""
    _check(_run(words))


def may_update_nodes() -> tuple[bool, str]:
    """Whether this user may ``scontrol update`` nodes: root, the SlurmUser, or an
    Operator/Administrator in the accounting database. (allowed, why)."""
    uid = os.getuid()
    try:
        me = pwd.getpwuid(uid).pw_name
    except KeyError:
        me = str(uid)
    if uid == 0:
        return True, "root"
    conf = _run(argv.slurm("scontrol", [], ["show", "config"]))
    for line in conf.stdout.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "SlurmUser" and value.strip().split("(")[0] == me:
            return True, f"{me} is the SlurmUser"
    try:  # without accounting (no slurmdbd) there is no admin level to ask for
        acct = _run(
            argv.slurm(
                "sacctmgr",
                ["--noheader", "--parsable2"],
                ["show", "user", argv.ssh_user(me), "format=adminlevel"],
            )
        )
        level = acct.stdout.strip() if acct.returncode == 0 else ""
    except InfraError:
        level = ""
    if level in ("Administrator", "Operator"):
        return True, f"{me} is a Slurm {level}"
    return False, f"{me} is neither root, the SlurmUser nor a Slurm Operator/Administrator"


class SlurmMarker(OneByOne):
    """The Slurm :class:`mlenv.quarantine.Marker`: drain with the note as reason, resume,
    one node after another; a node drained for another reason is left alone."""

    kind = "slurm"
    acts = True

    def commands(self, t: Target, *, remove: bool = False) -> list[str]:
        return [shell_line(resume_argv(t.node) if remove else drain_argv(t.node, t.note))]

    def unusable(self, t: Target) -> str | None:
        return None

    def permitted(self) -> tuple[bool, str]:
        return may_update_nodes()

    def foreign_mark(self, t: Target) -> str | None:
        st = node_state(t.node)
        if st is None:
            return "Slurm does not know this node"
        state, reason = st
        if drained(state) and not ours(reason, t.run_id):
            return f"already drained by someone else (State={state}, Reason={reason})"
        return None

    def not_ours_now(self, t: Target) -> str | None:
        st = node_state(t.node)
        if st is None:
            return "Slurm does not know this node any more"
        state, reason = st
        if not drained(state) or not ours(reason, t.run_id):
            return f"its drain is no longer this run's (State={state}, Reason={reason}): left alone"
        return None

    def mark(self, t: Target, *, remove: bool = False) -> None:
        run(resume_argv(t.node) if remove else drain_argv(t.node, t.note))
