"""Upstream ml-dev-env's launcher form: ``launch_deepspeed.sh SCRIPT [DS_CONFIG] [HOSTFILE] [ARGS…]``.

Upstream's ``./launch_deepspeed.sh train_multi_node.py ds_config.json`` gave the config
to the DeepSpeed runner, which the script then received as ``--deepspeed
--deepspeed_config ds_config.json``. Passed through as plain arguments the script got
``ds_config.json`` as a stray positional (argparse error) and ``deepspeed.initialize``
asserted for want of a config. The rule, applied to the words after the launch options
(``workspace/launch_deepspeed.sh`` only; ``scripts/pod-launch.sh`` and ``python -m
mlenv.pod launch`` pass everything through untouched):

1. the first word is SCRIPT unless it starts with ``-`` (then nothing is recognised);
2. the word after SCRIPT is DS_CONFIG when it names an existing file ending in ``.json``;
3. the next word is HOSTFILE when it names an existing file that does not end in
   ``.py`` or ``.json`` and parses as a DeepSpeed hostfile (``<host> slots=<n>`` lines);
   a file that does not parse stays a script argument;
4. everything after is ARGS. With a DS_CONFIG, ``--deepspeed`` and ``--deepspeed_config
   <file>`` are appended to ARGS unless ARGS already carry them.

So an existing ``.json`` right after the script is always taken as the DeepSpeed
config; a script whose own first argument is a JSON file is launched with
``scripts/pod-launch.sh`` (or ``python -m mlenv.pod launch``) instead.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from mlenv.errors import InputError
from mlenv.pod import hostfile


@dataclass(frozen=True)
class Positional:
    """The launch words after the upstream form was recognised."""

    words: list[str]  # SCRIPT ARGS… (with the DeepSpeed flags added), or the input unchanged
    ds_config: str | None = None
    hostfile: str | None = None


def _is_hostfile(path: str) -> bool:
    try:
        hostfile.parse_hostfile(path)
    except InputError:
        return False
    return True


def has_flag(args: Sequence[str], flag: str) -> bool:
    """``flag`` is among ``args``, alone or as ``flag=value``."""
    return any(a == flag or a.startswith(flag + "=") for a in args)


def parse(
    words: Sequence[str],
    isfile: Callable[[str], bool] = os.path.isfile,
    is_hostfile: Callable[[str], bool] = _is_hostfile,
) -> Positional:
    """Recognise ``SCRIPT [DS_CONFIG] [HOSTFILE] [ARGS…]`` in ``words`` (rule in the module doc)."""
    w = list(words)
    if not w or w[0].startswith("-"):
        return Positional(w)
    script, rest = w[0], w[1:]
    cfg = host = None
    if rest and rest[0].lower().endswith(".json") and isfile(rest[0]):
        cfg, rest = rest[0], rest[1:]
    if (
        rest
        and not rest[0].lower().endswith((".py", ".json"))
        and not rest[0].startswith("-")
        and isfile(rest[0])
        and is_hostfile(rest[0])
    ):
        host, rest = rest[0], rest[1:]
    if cfg is not None:
        if not has_flag(rest, "--deepspeed"):
            rest.append("--deepspeed")
        if not has_flag(rest, "--deepspeed_config"):
            rest += ["--deepspeed_config", cfg]
    return Positional([script, *rest], cfg, host)
