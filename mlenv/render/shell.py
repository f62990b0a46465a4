"""Jinja2 for shell scripts (the Slurm batch scripts): no value reaches bash unquoted.

Every ``{{ … }}`` must end in ``| q`` (``shlex.quote``) or, in a ``#`` comment, ``| comment``: the environment's ``finalize``
refuses any other output, so a template that forgets the filter fails to render instead
of writing an injectable script. Static shell text stays in the template itself; the
config's values were also checked by :mod:`mlenv.config.rules` before they get here.
"""

from __future__ import annotations

import functools
import shlex
from typing import Any

import jinja2

from mlenv.render.templating import template_dir


class Quoted(str):
    """A string already quoted for bash by :func:`q`."""

    __slots__ = ()


def q(value: Any) -> Quoted:
    """``value`` as one bash word (``shlex.quote``); integers and booleans as their text."""
    if isinstance(value, jinja2.Undefined):
        str(value)  # StrictUndefined raises, naming the variable
    if isinstance(value, bool):
        value = "true" if value else "false"
    if not isinstance(value, (str, int)):
        raise TypeError(f"q: cannot quote a {type(value).__name__} for the shell")
    text = shlex.quote(str(value))
    # shlex leaves '=x' bare; bash reads `export V==x` right, but shellcheck and people read
    # it as a typo (NCCL_IB_HCA's exact-match form starts with '=')
    return Quoted(f"'{text}'" if text.startswith("=") else text)


def comment(value: Any) -> Quoted:
    """``value`` for a ``#`` comment line: one line, printable (anything else escaped), so no
    text can end the comment and start a command."""
    text = str(value)
    if not text.isprintable():
        text = repr(text)[1:-1]
    return Quoted(text)


def _finalize(value: Any) -> Any:
    if not isinstance(value, Quoted):
        raise ValueError(f"shell template: {value!r} reaches the script without '| q'")
    return value


@functools.lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(template_dir())),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=_finalize,
    )
    env.filters["q"] = q
    env.filters["comment"] = comment
    return env


def render_script(template: str, /, **values: Any) -> str:
    """Render the shell template ``template`` (a path under the templates folder)."""
    return _environment().get_template(template).render(**values)
