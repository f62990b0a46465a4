"""What every section's rules share: the :class:`Checker` that collects diagnostics with
their positions, the name and quantity grammars of Kubernetes, and the small text helpers
that shape the messages."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Any

from mlenv.config.yamlpos import JsonPath, Parsed, format_path
from mlenv.errors import Diagnostic

# Every pattern ends in \Z, not $: Python's $ also matches before a trailing newline,
# so "demo\n" would pass as a name and become a folder and a manifest name.
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")
# Kubernetes resource.Quantity: a non-negative decimal with a binary-SI, decimal-SI or
# exponent suffix (apimachinery/pkg/api/resource/quantity.go).
_QUANTITY = re.compile(
    r"^(?P<num>[0-9]+(\.[0-9]*)?|\.[0-9]+)(?P<suf>Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][-+]?[0-9]+)?\Z"
)
_SUFFIX = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
}
_IFNAME = re.compile(r"^[A-Za-z0-9_.:-]{1,15}\Z")  # Linux IFNAMSIZ is 16 with the NUL
# A quoted integer such as gid_index: "3"; ASCII only (str.isdigit() also accepts "²").
_DIGITS = re.compile(r"[0-9]+")
# Kubernetes caps every quantity at 2^63-1 base units (apimachinery resource.Quantity).
MAX_QUANTITY = Decimal(2**63 - 1)


def parse_quantity(text: str) -> Decimal | None:
    """A Kubernetes quantity as a Decimal in base units, or None when it is not one.

    A well-formed quantity too large to compute (``1e999999999``) comes back as
    ``Decimal("Infinity")``: callers compare it with :data:`MAX_QUANTITY`.
    """
    m = _QUANTITY.match(text)
    if not m:
        return None
    suf = m.group("suf") or ""
    try:
        num = Decimal(m.group("num"))
        if suf not in _SUFFIX:  # an exponent (1e3); "E" and "Ei" are exa and exbi
            exp = suf[1:]
            # int() of a 5000-digit exponent raises; any exponent this long overflows anyway.
            if len(exp.lstrip("+-").lstrip("0")) > 6:
                return Decimal("Infinity") if not exp.startswith("-") else Decimal(0)
            return num * (Decimal(10) ** int(exp))
        return num * _SUFFIX[suf]
    except InvalidOperation:
        return None
    except ArithmeticError:  # decimal.Overflow: the exponent is beyond Decimal's range
        return Decimal("Infinity")


def split_list(value: Any) -> list[str] | None:
    """A comma string (``"mlx5_6, mlx5_7"``) or a list → list of names; None if neither."""
    if isinstance(value, str):
        return [p.strip() for p in value.split(",") if p.strip()]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return [v.strip() for v in value]
    return None


def _get(data: Any, *path: str) -> Any:
    for p in path:
        if not isinstance(data, dict):
            return None
        data = data.get(p)
    return data


class Checker:
    """One config's data and the diagnostics found in it so far; the sections' rules are
    functions of it, run in the order :func:`mlenv.config.rules.semantic_diagnostics` gives."""

    def __init__(self, parsed: Parsed, file: str) -> None:
        self.parsed = parsed
        self.data = parsed.data
        self.file = file
        self.out: list[Diagnostic] = []

    def err(
        self,
        path: JsonPath,
        message: str,
        hint: str = "",
        *,
        key: bool = False,
        severity: str = "error",
    ) -> None:
        pos = self.parsed.pos(path, key=key)
        self.out.append(
            Diagnostic(self.file, pos.line, pos.col, format_path(path), message, hint, severity)
        )

    def warn(self, path: JsonPath, message: str, hint: str = "", *, key: bool = False) -> None:
        self.err(path, message, hint, key=key, severity="warning")

    # --- names -------------------------------------------------------------------------

    def label(self, path: JsonPath, what: str) -> None:
        value = _get(self.data, *[str(p) for p in path])
        if not isinstance(value, str):
            return
        if len(value) > 63:
            self.err(
                path,
                f"{what} {value[:20]!r}... is {len(value)} characters; a DNS-1123 label has at most 63",
            )
        elif not _LABEL.match(value):
            self.err(
                path,
                f"{what} {value!r} is not a DNS-1123 label (lowercase letters, digits and '-', starting and ending with a letter or digit)",
                _fix_hint(value),
            )

    def subdomain(self, path: JsonPath, value: Any, what: str) -> None:
        if not isinstance(value, str):
            return
        if len(value) > 253:
            self.err(
                path, f"{what} is {len(value)} characters; a DNS-1123 subdomain has at most 253"
            )
        elif not _SUBDOMAIN.match(value) or any(len(p) > 63 for p in value.split(".")):
            self.err(
                path,
                f"{what} {value!r} is not a DNS-1123 subdomain (lowercase letters, digits, '-' and '.')",
                _fix_hint(value),
            )

    # --- quantities ----------------------------------------------------------------------

    def quantity(self, path: JsonPath, *, positive: bool = True) -> Decimal | None:
        value = _get(self.data, *[str(p) for p in path])
        if value is None or isinstance(value, bool):
            return None
        if isinstance(value, (int, float)):
            value = str(value)
        if not isinstance(value, str):
            return None
        # Not stripped: Kubernetes refuses " 8Gi ", and the value is rendered as written.
        q = parse_quantity(value)
        if q is None:
            self.err(
                path,
                f"{value!r} is not a Kubernetes quantity (e.g. 100Gi, 512Mi, 8, 500m)",
                _quantity_hint(value),
            )
            return None
        if q > MAX_QUANTITY:
            shown = value if len(value) <= 40 else value[:37] + "..."
            self.err(
                path,
                f"{shown!r} is too large for a Kubernetes quantity (at most 2^63-1 base units)",
            )
            return None
        if positive and q <= 0:
            self.err(path, f"{value!r} must be greater than zero")
            return None
        return q

    @property
    def plat(self) -> str:
        """The config's platform ('openshift' when unset or not a string: the schema said so)."""
        p = self.data.get("platform", "openshift") if isinstance(self.data, dict) else "openshift"
        return p if isinstance(p, str) else "openshift"

    @property
    def off_k8s(self) -> bool:
        """slurm or hosts: grammars widen per key where Slurm and ssh take what Kubernetes does not."""
        return self.plat in ("slurm", "hosts")


# An image reference as the OCI distribution grammar has it: [domain[:port]/]name
# components[:tag][@sha256:digest]. No whitespace, control characters or leading '-'.
_NAME_COMP = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*(?::[0-9]+)?"
_IMAGE_REF = re.compile(
    rf"(?:{_DOMAIN}/)?{_NAME_COMP}(?:/{_NAME_COMP})*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[a-f0-9]{64})?"
)
_COMMAND = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,63}")
_PATH_CHARS = r"[A-Za-z0-9_./+-]*"


def _abs_path_ok(v: str) -> bool:
    return (
        v.startswith("/")
        and re.fullmatch(_PATH_CHARS, v) is not None
        and ".." not in v.split("/")
        and len(v) <= 1024
    )


def _abs_path(c: Checker, path: JsonPath, v: Any) -> None:
    if isinstance(v, str) and v and not _abs_path_ok(v):
        c.err(
            path,
            f"{_short(v)} is not an absolute path (letters, digits, '_', '.', '/', '+', '-'; "
            "no '..', spaces or shell metacharacters)",
        )


def _python(c: Checker, path: JsonPath, v: Any) -> None:
    if isinstance(v, str) and not (_COMMAND.fullmatch(v) or _abs_path_ok(v)):
        c.err(
            path,
            f"{_short(v)} is not a command name (python3) or an absolute path to an "
            "interpreter (no spaces, options or shell metacharacters)",
        )


def _char(c: str) -> str:
    return {"\n": "a newline", "\r": "a carriage return", "\t": "a tab"}.get(
        c,
        repr(c)
        if c.isprintable()
        else f"control character {ord(c):#04x}"
        if ord(c) < 0x100
        else f"the invisible formatting character U+{ord(c):04X}",
    )


def _short(v: str) -> str:
    return repr(v) if len(v) <= 60 else repr(v[:57] + "...")


def _as_int(v: Any) -> int | None:
    """An int or an ASCII digit string (at most 6 digits) as int; None otherwise."""
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    if isinstance(v, str) and _DIGITS.fullmatch(v) and len(v) <= 6:
        return int(v)
    return None


def _fix_hint(value: str) -> str:
    fixed = re.sub(r"[^a-z0-9.-]+", "-", value.lower()).strip("-.")
    return f"did you mean '{fixed}'?" if fixed and fixed != value else ""


def _quantity_hint(value: str) -> str:
    m = re.match(r"^\s*([0-9.]+)\s*([KMGTPE])i?B\s*$", value, re.IGNORECASE)
    if m:
        return f"did you mean '{m.group(1)}{m.group(2).upper()}i'?"
    m = re.match(r"^\s*([0-9.]+)\s+(\S+)\s*$", value)
    if m and parse_quantity(m.group(1) + m.group(2)) is not None:
        return f"did you mean '{m.group(1)}{m.group(2)}', without the space?"
    if value != value.strip() and parse_quantity(value.strip()) is not None:
        return f"did you mean '{value.strip()}', without the surrounding spaces?"
    return ""
