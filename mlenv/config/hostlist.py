"""Slurm host names and hostlist expressions (``hgx[01-04]``, ``gpu[1,3-5]-ib``), pure.

Slurm sites name nodes as their vendors and racks do (``GPU_Node7``, ``Lambda-H100-2``)
and write sets of them as hostlists. Both are accepted on ``platform: slurm`` (hostlists)
and ``platform: hosts`` (real names) only: on Kubernetes a node name is a DNS-1123
subdomain. Expansion is bounded (:data:`MAX_HOSTS`) so a config cannot ask for
``n[0-999999999]``; what comes out is a list of names :func:`mlenv.argv.slurm_node` takes.
"""

from __future__ import annotations

import re

MAX_HOSTS = 4096
# A real host name as Slurm and ssh take it: letters, digits, '-', '_', '.', starting and
# ending with a letter or digit (never option-shaped, never a shell metacharacter).
HOST = re.compile(r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,251}[A-Za-z0-9])?")
_PART = r"[-A-Za-z0-9_.]*"
_RANGE = r"[0-9]{1,9}(?:-[0-9]{1,9})?"
_BRACKET = rf"\[{_RANGE}(?:,{_RANGE})*\]"
HOSTLIST = re.compile(rf"[A-Za-z0-9]{_PART}(?:{_BRACKET}{_PART})*")


class HostlistError(ValueError):
    """Not a host name or a hostlist expression (the message says why)."""


def expand(expr: str) -> list[str]:
    """``hgx[01-04]`` → ``[hgx01, hgx02, hgx03, hgx04]``; a plain name → ``[name]``.

    Zero padding follows the lower bound's width, as Slurm's ``scontrol show hostnames``
    does. Raises HostlistError for anything else, a reversed range, more than
    :data:`MAX_HOSTS` names, or a name that is not a host name.
    """
    if not isinstance(expr, str) or not HOSTLIST.fullmatch(expr) or len(expr) > 253:
        raise HostlistError(
            "not a host name or a Slurm hostlist such as hgx[01-04] (letters, digits, "
            "'-', '_', '.', and [ranges] of numbers)"
        )
    names = [""]
    for literal, bracket in re.findall(rf"({_PART})(\[[^\]]*\])?", expr):
        names = [n + literal for n in names]
        if not bracket:
            continue
        numbers: list[str] = []
        for item in bracket[1:-1].split(","):
            lo, _, hi = item.partition("-")
            if hi and int(hi) < int(lo):
                raise HostlistError(f"range {item} goes backwards")
            width = len(lo)
            count = (int(hi) - int(lo) + 1) if hi else 1
            if len(numbers) + count > MAX_HOSTS:
                raise HostlistError(f"expands to more than {MAX_HOSTS} hosts")
            numbers += [str(i).zfill(width) for i in range(int(lo), int(lo) + count)]
        if len(names) * len(numbers) > MAX_HOSTS:
            raise HostlistError(f"expands to more than {MAX_HOSTS} hosts")
        names = [n + num for n in names for num in numbers]
    for n in names:
        if not HOST.fullmatch(n):
            raise HostlistError(f"expands to {n!r}, which is not a host name")
    return names


def expand_all(entries: list[str] | tuple[str, ...]) -> list[str]:
    """Every entry expanded, in order (HostlistError as :func:`expand`, or past MAX_HOSTS)."""
    out: list[str] = []
    for e in entries:
        out += expand(e)
        if len(out) > MAX_HOSTS:
            raise HostlistError(f"the list expands to more than {MAX_HOSTS} hosts")
    return out
