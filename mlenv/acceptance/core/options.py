"""Typed check options: each check declares its options as a frozen dataclass.

The SuperBench idea (every benchmark declares its own arguments with defaults), with
two defaults per option, one for a CPU rank and one for a GPU rank::

    @dataclass(frozen=True)
    class MatmulOptions(CheckOptions):
        n: int = option(512, cuda=8192, help="matrix size (n×n by n×n)")

    @register
    class MatmulCheck(Check):
        name = "compute.matmul"
        Options = MatmulOptions

        def run(self, ctx):
            o = ctx.options_of(MatmulOptions, self.name)  # typed, resolved

Where values come from, lowest first: the check's default for the device, the profile's
overrides (:mod:`mlenv.acceptance.core.profiles`), its GPU overrides on a CUDA rank, then the
user's ``--options`` file. Each layer is a mapping ``{section: {key: value}}`` where a
section is a check name (``compute.matmul``) or a family (``compute``): a family section
sets the key on every check of the family that declares it, a check section wins over
its family. A key no check of the section declares, a value of the wrong type, or a
value a check's own rules refuse is an :class:`~mlenv.errors.InputError` that names the
file, line and column the value came from (exit 2).

Only the standard library and the strict YAML reader of :mod:`mlenv.config.yamlpos`
(duplicate keys are errors, as in cluster configs).
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar, get_type_hints

from mlenv.acceptance.core.yamlfile import read_strict
from mlenv.errors import InputError

T = TypeVar("T")
OptT = TypeVar("OptT", bound="CheckOptions")

# The types an option may have: what YAML/JSON scalars map to.
OPTION_TYPES: dict[type, str] = {
    int: "an integer",
    float: "a number",
    str: "a string",
    bool: "true or false",
}

Section = dict[str, Any]
"""``{key: value}`` of one check or family."""


class _Same:
    """Sentinel: the CUDA default is the CPU default."""

    def __repr__(self) -> str:
        return "SAME"


SAME: Any = _Same()


def option(cpu: T, *, cuda: T = SAME, help: str) -> T:  # noqa: A002 - the word the docs use
    """A dataclass field with a CPU default, a CUDA default (default: the same) and a help line."""
    return field(default=cpu, metadata={"cuda": cpu if cuda is SAME else cuda, "help": help})


@dataclass(frozen=True)
class OptionSpec:
    """One declared option, as the docs table and the error messages show it."""

    name: str
    type: type
    cpu: Any
    cuda: Any
    help: str

    def default(self, cuda: bool) -> Any:
        """The default on a GPU rank (``cuda``) or a CPU rank."""
        return self.cuda if cuda else self.cpu


@dataclass(frozen=True)
class CheckOptions:
    """Base of every check's options dataclass (no options of its own).

    Subclasses add fields made with :func:`option` and may override :meth:`problems`
    for rules between or on values (ranges, choices) that a type cannot say.
    """

    _specs_cache: ClassVar[dict[type, tuple[OptionSpec, ...]]] = {}

    @classmethod
    def specs(cls) -> tuple[OptionSpec, ...]:
        """The declared options, in declaration order."""
        hit = CheckOptions._specs_cache.get(cls)
        if hit is not None:
            return hit
        hints = get_type_hints(cls)
        out: list[OptionSpec] = []
        for f in dataclasses.fields(cls):
            kind = hints[f.name]
            if kind not in OPTION_TYPES:
                raise TypeError(
                    f"{cls.__name__}.{f.name}: option type {kind!r} is not one of int, float, str, bool"
                )
            if "help" not in f.metadata:
                raise TypeError(
                    f"{cls.__name__}.{f.name}: declare options with option(cpu, cuda=..., help=...)"
                )
            out.append(
                OptionSpec(f.name, kind, f.default, f.metadata["cuda"], str(f.metadata["help"]))
            )
        CheckOptions._specs_cache[cls] = tuple(out)
        return CheckOptions._specs_cache[cls]

    @classmethod
    def keys(cls) -> tuple[str, ...]:
        """The declared option names."""
        return tuple(s.name for s in cls.specs())

    @classmethod
    def defaults(cls, cuda: bool) -> dict[str, Any]:
        """``{name: default}`` on a GPU rank (``cuda``) or a CPU rank."""
        return {s.name: s.default(cuda) for s in cls.specs()}

    def problems(self) -> list[tuple[str, str]]:
        """``(option, what is wrong)`` for values the check refuses; empty when all is well."""
        return []

    def to_dict(self) -> dict[str, Any]:
        """``{name: value}`` (JSON-ready: every option is a scalar)."""
        return {s.name: getattr(self, s.name) for s in self.specs()}


def at_least(opts: CheckOptions, low: float, *keys: str) -> list[tuple[str, str]]:
    """``problems()`` entries for each of ``keys`` whose value is below ``low``."""
    return [
        (k, f"must be >= {low}, got {getattr(opts, k)}") for k in keys if getattr(opts, k) < low
    ]


class OptionLayer(dict[str, Section]):
    """One layer of overrides ``{section: {key: value}}`` plus where each value came from.

    ``where[(section, key)]`` is ``file:line:col`` of the value and ``key_where`` that of
    the key; a layer built in code (a profile, a test) has no positions.
    """

    def __init__(self, data: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        super().__init__({str(k): dict(v) for k, v in (data or {}).items()})
        self.where: dict[tuple[str, str], str] = {}
        self.key_where: dict[tuple[str, str], str] = {}
        self.section_where: dict[str, str] = {}

    def locate(self, section: str, key: str | None = None, *, of_key: bool = False) -> str:
        """The best ``file:line:col`` for a section or one of its values ('' when unknown)."""
        if key is not None:
            table = self.key_where if of_key else self.where
            if (section, key) in table:
                return table[(section, key)]
        return self.section_where.get(section, "")


def merge(layers: Iterable[Mapping[str, Mapping[str, Any]]]) -> OptionLayer:
    """Layers merged key by key, later ones winning, with the positions of the winners."""
    out = OptionLayer()
    for layer in layers:
        for section, kv in layer.items():
            out.setdefault(section, {}).update(kv)
            located = layer if isinstance(layer, OptionLayer) else OptionLayer()
            if section in located.section_where:
                out.section_where.setdefault(section, located.section_where[section])
            for key in kv:  # a value's position is the position of the layer it came from
                for src, dst in ((located.where, out.where), (located.key_where, out.key_where)):
                    if (section, key) in src:
                        dst[(section, key)] = src[(section, key)]
                    else:
                        dst.pop((section, key), None)
    return out


def family(check: str) -> str:
    """``collectives`` for ``collectives.all_reduce``; a name without a dot is its own family."""
    return check.split(".", 1)[0]


def _fail(
    layer: Mapping[str, Any], section: str, key: str | None, message: str, *, of_key: bool = False
) -> InputError:
    where = layer.locate(section, key, of_key=of_key) if isinstance(layer, OptionLayer) else ""
    what = f"{section}.{key}" if key is not None else section
    return InputError(f"{where + ': ' if where else 'options: '}{what}: {message}")


def coerce(spec: OptionSpec, value: Any) -> Any:
    """``value`` as ``spec.type``, or raise ValueError saying what was expected.

    Integers accept a number with no fractional part (``1e3`` written as ``1000.0``);
    numbers accept integers; nothing accepts a boolean but a boolean (YAML's ``yes``).
    """
    t = spec.type
    ok = False
    if t is bool:
        ok = isinstance(value, bool)
    elif isinstance(value, bool):
        ok = False
    elif t is int:
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        ok = isinstance(value, int)
    elif t is float:
        ok = isinstance(value, (int, float))
        value = float(value) if ok else value
    elif t is str:
        ok = isinstance(value, str)
    if not ok:
        raise ValueError(f"expected {OPTION_TYPES[t]}, got {value!r}")
    return value


def build(
    cls: type[OptT],
    check: str,
    layer: Mapping[str, Mapping[str, Any]],
    *,
    cuda: bool,
    family_keys: Iterable[str] = (),
) -> OptT:
    """The typed options of check ``check`` from its defaults and ``layer`` (already merged).

    ``family_keys``: options other checks of the family declare, which a family section
    may hold without being wrong for this check. Raises InputError, located.
    """
    opts, problems = _build(cls, check, layer, cuda=cuda, family_keys=family_keys)
    if problems:
        raise _all_at_once(problems)
    return opts


# A problem and what it is about: (section, key) where the user wrote the value, or the
# family and key of a rule broken by a family value (reported once, not per check and device).
_Problem = tuple[tuple[str, str | None], InputError]


def _build(
    cls: type[OptT],
    check: str,
    layer: Mapping[str, Mapping[str, Any]],
    *,
    cuda: bool,
    family_keys: Iterable[str],
) -> tuple[OptT, list[_Problem]]:
    """:func:`build`, returning every problem found instead of raising the first."""
    specs = {s.name: s for s in cls.specs()}
    values = cls.defaults(cuda)
    origin: dict[str, str] = {}
    fam = family(check)
    allowed_in_family = set(specs) | set(family_keys)
    sections = [fam, check] if fam != check else [check]
    problems: list[_Problem] = []  # every problem of the file at once
    for section in sections:
        kv = layer.get(section)
        if not kv:
            continue
        allowed = allowed_in_family if section == fam and fam != check else set(specs)
        for key, raw in kv.items():
            if key not in allowed:
                problems.append(
                    (
                        (section, str(key)),
                        _fail(
                            layer,
                            section,
                            str(key),
                            _unknown(str(key), sorted(allowed)),
                            of_key=True,
                        ),
                    )
                )
                continue
            if key not in specs:
                continue  # another check of the family's option
            try:
                values[key] = coerce(specs[key], raw)
            except ValueError as e:
                problems.append(((section, key), _fail(layer, section, key, str(e))))
                continue
            origin[key] = section
    opts = cls(**values)
    for key, message in opts.problems():
        about = origin.get(key) or next((origin[k] for k in origin if origin[k] == fam), check)
        problems.append(((about, key), _fail(layer, origin.get(key, check), key, message)))
    return opts, problems


def _all_at_once(problems: Iterable[_Problem]) -> InputError:
    """One InputError for every distinct problem (the first message of each), in the order
    found, one line each."""
    first: dict[tuple[str, str | None], str] = {}
    for about, e in problems:
        first.setdefault(about, str(e))
    lines = list(dict.fromkeys(first.values()))
    if len(lines) == 1:
        return InputError(lines[0])
    return InputError(
        f"{len(lines)} problems in the options:\n" + "\n".join(f"  {x}" for x in lines)
    )


def _unknown(key: str, known: list[str]) -> str:
    close = difflib.get_close_matches(key, known, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"unknown option{hint}; known: {', '.join(known) or 'none (this check has no options)'}"


def validate(
    layer: Mapping[str, Mapping[str, Any]], checks: Mapping[str, type[CheckOptions]]
) -> None:
    """Every section names a check or family of ``checks``; every check's options build on CPU and GPU.

    ``checks``: check name → its options class (the registry). Raises InputError, located.
    """
    families = {family(c) for c in checks}
    problems: list[_Problem] = []
    for section in layer:
        if section not in checks and section not in families:
            known = sorted(set(checks) | families)
            close = difflib.get_close_matches(section, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            problems.append(
                (
                    (section, None),
                    _fail(
                        layer,
                        section,
                        None,
                        f"unknown check or family{hint}; known: {', '.join(known)}",
                    ),
                )
            )
    for name, cls in sorted(checks.items()):
        siblings = [
            k
            for other, ocls in checks.items()
            if family(other) == family(name)
            for k in ocls.keys()
        ]
        for cuda in (False, True):
            problems += _build(cls, name, layer, cuda=cuda, family_keys=siblings)[1]
    if problems:
        raise _all_at_once(problems)


# ----------------------------------------------------------------------------- files


def load_file(path: str | os.PathLike[str]) -> OptionLayer:
    """Read an options file (YAML or JSON, ``{check or family: {option: value}}``).

    Parsed with the strict reader of cluster configs: a duplicated key, a second
    document or an unreadable value is an InputError with ``file:line:col``.
    """
    p = Path(path)
    file = str(p)
    data, parsed = read_strict(p, "options file")
    layer = OptionLayer()
    if data is None:
        return layer
    if not isinstance(data, dict):
        raise InputError(
            f"{file}:1:1: expected a mapping of check name to options, got {type(data).__name__}"
        )
    assert parsed is not None
    for section, kv in data.items():
        spos = parsed.pos((section,), key=True)
        layer.section_where[section] = f"{file}:{spos.line}:{spos.col}"
        if kv is None:
            kv = {}
        if not isinstance(kv, dict):
            vpos = parsed.pos((section,))
            raise InputError(
                f"{file}:{vpos.line}:{vpos.col}: {section}: expected a mapping of option name "
                f"to value, got {type(kv).__name__}"
            )
        layer[section] = dict(kv)
        for key in kv:
            vpos, kpos = parsed.pos((section, key)), parsed.pos((section, key), key=True)
            layer.where[(section, key)] = f"{file}:{vpos.line}:{vpos.col}"
            layer.key_where[(section, key)] = f"{file}:{kpos.line}:{kpos.col}"
    return layer
