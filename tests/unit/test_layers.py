"""The layering of docs/architecture.md, enforced: who may import whom, who may print,
who may start processes, and where heavy libraries may be imported at module level.

Read from the source with ``ast`` (nothing is imported), so a new violation fails here
with the file and line instead of surfacing as a slow ``mlenv --help`` or a pod image
that cannot import a module. Changing a rule means changing docs/architecture.md too.
"""

from __future__ import annotations

import ast
import io
import re
import sys
import tokenize
from dataclasses import dataclass
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "mlenv"

# Layer of a module: its sub-package, or its own name for top-level modules.
# layer → the mlenv layers it may import (itself always allowed).
MAY_IMPORT: dict[str, set[str]] = {
    "errors": set(),
    "argv": {"errors"},
    "contract": {"errors"},
    # The worker object of a Kubernetes deployment (mlenv.workload): pure, stdlib only,
    # since the pods name their peers through it.
    "workload": {"errors", "contract"},
    "config": {"errors", "contract", "argv"},
    "render": {"config", "errors", "contract", "argv", "workload"},
    "generated": {"render"},
    # The sign-off bundle's operator-side parts: the run's cluster, config, deployed trees.
    "signoff": {"errors", "contract", "config", "render", "acceptance"},
    # The platform interface: Kubernetes through cluster/ and render/, Slurm and hosts.
    # platforms mark nodes for quarantine (their Marker) and run its verbs.
    "platforms": {
        "config",
        "render",
        "cluster",
        "errors",
        "contract",
        "argv",
        "generated",
        "acceptance",
        "quarantine",
        "workload",
    },
    # quarantine/release of a run's FAILED nodes, platform-neutral: the run, the
    # targets, the records; what a mark is comes from the platform (a Marker).
    "quarantine": {"errors", "contract", "argv", "acceptance"},
    "cluster": {"config", "render", "errors", "contract", "argv", "generated", "workload"},
    # Runs inside pods from the package alone: never the operator-side layers.
    "pod": {"errors", "contract", "argv", "workload"},
    # Also inside pods; reads options/baselines with the config layer's strict YAML loader
    # and counts GPUs like pod-init does.
    "acceptance": {"errors", "contract", "config", "pod"},
    # What a verb does, below the CLI (acceptance's run/record/bundle, render's
    # check/write): everything the CLI calls, never the CLI itself.
    "service": {
        "errors",
        "contract",
        "config",
        "render",
        "generated",
        "platforms",
        "acceptance",
        "signoff",
    },
    # Test support, not in the wheel: the fake cluster, fake kubectl, fake_mlenv (runs the CLI).
    "testing": {"config", "render", "errors", "contract", "argv", "cluster", "cli"},
    "cli": {"*"},
    "__init__": set(),
    "__main__": {"cli"},
}

# Third-party packages each layer may import at all (stdlib is always fine).
THIRD_PARTY: dict[str, set[str]] = {
    "errors": set(),
    "argv": set(),
    "contract": set(),
    "workload": set(),
    "__init__": set(),
    "__main__": set(),
    "config": {"yaml", "jsonschema"},
    "render": {"yaml", "jsonschema", "jinja2", "referencing"},
    "generated": set(),
    "signoff": set(),
    "quarantine": set(),
    "service": set(),  # it speaks through a Notifier: no typer, no terminal
    "platforms": {"yaml", "jinja2"},
    "cluster": {"yaml"},
    "pod": set(),  # the pod image's Python may have nothing but the stdlib
    "acceptance": {"torch", "deepspeed", "numpy", "matplotlib", "yaml", "prometheus_client"},
    "testing": {"yaml"},
    "cli": {"typer", "click", "yaml"},
}

# Libraries that cost seconds to import: only inside the functions that need them, so
# `mlenv --help` and every verb that does not measure anything start fast.
HEAVY = {
    "torch",
    "deepspeed",
    "numpy",
    "matplotlib",
    "openshift_client",
    "jsonschema",
    "jinja2",
    "kubernetes_validate",
    "referencing",
}
# Where a module-level heavy import is fine: modules only ever imported in the ranks, or
# already behind a function-level import in every caller.
HEAVY_OK_PREFIXES = (
    "mlenv/acceptance/",
    "mlenv/render/",
    "mlenv/config/schema.py",
    "mlenv/config/docs.py",
    "mlenv/cluster/oc.py",
)

# Who may write to the terminal: the CLI, the in-pod entry points, and the acceptance
# ranks' console (rank 0 prints the live lines and the verdict, as nccl-tests does).
MAY_PRINT = (
    "mlenv/cli/",
    # `python -m mlenv` in a Python without the dependencies: its one line (no CLI to say it)
    "mlenv/__main__.py",
    "mlenv/pod/__main__.py",
    "mlenv/pod/runtime.py",
    "mlenv/acceptance/__main__.py",
    "mlenv/acceptance/reports/console.py",
    "mlenv/acceptance/checks/collectives.py",
    "mlenv/config/docs.py",
    "mlenv/testing/kubectl_cli.py",
    "mlenv/testing/fake_mlenv.py",
    # an entry point (`python -m`, run by make venv) whose one warning goes to the rank's stderr
    "mlenv/acceptance/checks/dsops.py",
    "mlenv/testing/kube/__main__.py",
    "mlenv/testing/kube/podroots.py",
)
PRINT_CALLS = {"print", "typer.echo", "click.echo", "sys.stdout.write", "sys.stderr.write"}

# Who may start processes: the cluster client and key generation, the pod runtime, the
# acceptance launcher and environment probes, the Slurm/hosts drivers. Never the CLI
# (a verb parses, calls and prints), config or render.
MAY_SPAWN = (
    "mlenv/cluster/oc.py",
    "mlenv/cluster/keys.py",
    "mlenv/pod/",
    "mlenv/acceptance/",
    "mlenv/platforms/",
    "mlenv/testing/",
)
SPAWN_PREFIXES = ("subprocess.", "os.exec", "os.spawn", "asyncio.create_subprocess")
SPAWN_CALLS = {
    "os.system",
    "os.popen",
    "os.fork",
    "os.posix_spawn",
    "os.posix_spawnp",
    "pty.spawn",
    "Popen",
}


@dataclass(frozen=True)
class Module:
    path: str  # relative, e.g. mlenv/cluster/oc.py
    layer: str
    tree: ast.Module
    source: str = ""  # the file's text; empty for a module built from a tree alone


def _modules() -> list[Module]:
    out = []
    for p in sorted(PKG.rglob("*.py")):
        rel = p.relative_to(PKG.parent).as_posix()
        parts = p.relative_to(PKG).parts
        layer = parts[0] if len(parts) > 1 else parts[0].removesuffix(".py")
        text = p.read_text(encoding="utf-8")
        out.append(Module(rel, layer, ast.parse(text, rel), text))
    return out


MODULES = _modules()
# The package's files as parsed once above: the import graph reads them again from here
# (parsing the package took about a second of the cycle test), a planted tree from disk.
PARSED: dict[Path, ast.Module] = {PKG.parent / m.path: m.tree for m in MODULES}


def _imports(m: Module) -> list[tuple[int, str, bool]]:
    """(line, module, at module level) for every import in ``m``."""
    top = {id(n) for n in m.tree.body}
    for (
        stmt
    ) in m.tree.body:  # `if TYPE_CHECKING:` / try blocks at module level count as module level
        if isinstance(stmt, (ast.If, ast.Try)):
            top |= {id(x) for x in ast.walk(stmt)}
    found = []
    for n in ast.walk(m.tree):
        if isinstance(n, ast.Import):
            found += [(n.lineno, a.name, id(n) in top) for a in n.names]
        elif isinstance(n, ast.ImportFrom) and n.module and n.level == 0:
            found.append((n.lineno, n.module, id(n) in top))
    return found


def _calls(m: Module) -> list[tuple[int, str]]:
    out = []
    for n in ast.walk(m.tree):
        if isinstance(n, ast.Call) and isinstance(n.func, (ast.Name, ast.Attribute)):
            out.append((n.lineno, ast.unparse(n.func)))
    return out


def test_every_module_has_a_known_layer() -> None:
    unknown = sorted({m.layer for m in MODULES} - set(MAY_IMPORT))
    assert not unknown, f"layers without rules in this test and docs/architecture.md: {unknown}"


@pytest.mark.parametrize("m", MODULES, ids=lambda m: m.path)
def test_imports_follow_the_layering(m: Module) -> None:
    allowed = MAY_IMPORT.get(m.layer, set())
    bad = []
    for line, mod, _ in _imports(m):
        parts = mod.split(".")
        if parts[0] != "mlenv" or len(parts) < 2 or "*" in allowed:
            continue
        target = parts[1]
        if target != m.layer and target not in allowed:
            bad.append(
                f"{m.path}:{line}: layer {m.layer!r} imports {mod} (allowed: {sorted(allowed) or 'none'})"
            )
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("m", MODULES, ids=lambda m: m.path)
def test_third_party_imports_per_layer(m: Module) -> None:
    allowed = THIRD_PARTY.get(m.layer, set())
    bad = []
    for line, mod, at_top in _imports(m):
        top = mod.split(".")[0]
        if top in ("mlenv", "__future__") or top in sys.stdlib_module_names:
            continue
        if top not in allowed:
            bad.append(f"{m.path}:{line}: layer {m.layer!r} imports third-party {top!r}")
        elif at_top and top in HEAVY and not m.path.startswith(HEAVY_OK_PREFIXES):
            bad.append(
                f"{m.path}:{line}: {top!r} imported at module level (import it inside the function)"
            )
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("m", MODULES, ids=lambda m: m.path)
def test_only_the_edges_print(m: Module) -> None:
    if m.path.startswith(MAY_PRINT):
        return
    bad = [
        f"{m.path}:{line}: {name}(...) outside the CLI/console (return text or take a `say` callback)"
        for line, name in _calls(m)
        if name in PRINT_CALLS
    ]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("m", MODULES, ids=lambda m: m.path)
def test_only_the_runners_start_processes(m: Module) -> None:
    if m.path.startswith(MAY_SPAWN):
        return
    bad = [
        f"{m.path}:{line}: {name}(...) starts a process outside the layers allowed to"
        for line, name in _calls(m)
        if name in SPAWN_CALLS or name.startswith(SPAWN_PREFIXES)
    ]
    assert not bad, "\n".join(bad)


# Object names are typed once: contract.py and render/names.py (and the functions there and
# in render/workload.py that build them from those constants). cluster/legacy.py names
# upstream ml-dev-env's own objects, fixed by what upstream created.
NAMES_AT_HOME = ("mlenv/contract.py", "mlenv/render/names.py", "mlenv/cluster/legacy.py")
OBJECT_NAME = re.compile(r"^ml-dev-env(-|$)")


def _name_literals(m: Module) -> list[tuple[int, str]]:
    """(line, text) of string literals, and f-strings' leading text, shaped like an object name."""
    out = []
    for n in ast.walk(m.tree):
        if isinstance(n, ast.JoinedStr) and n.values and isinstance(n.values[0], ast.Constant):
            head = n.values[0].value
            if isinstance(head, str) and OBJECT_NAME.match(head):
                out.append((n.lineno, ast.unparse(n)))
        elif (
            isinstance(n, ast.Constant) and isinstance(n.value, str) and OBJECT_NAME.match(n.value)
        ):
            out.append((n.lineno, repr(n.value)))
    return out


@pytest.mark.parametrize("m", MODULES, ids=lambda m: m.path)
def test_object_names_are_typed_in_one_place(m: Module) -> None:
    if m.path in NAMES_AT_HOME:
        return
    bad = [
        f"{m.path}:{line}: {text}: use the name from mlenv/contract.py or mlenv/render/names.py"
        for line, text in _name_literals(m)
    ]
    assert not bad, "\n".join(bad)


# Verbs whose work lives in mlenv/service/: they parse and check flags, call their service
# and print what it says; the layers below are the service's to call, not theirs.
SERVICE_VERBS = {
    "mlenv/cli/cmd_acceptance.py": "mlenv.service.acceptance",
    "mlenv/cli/cmd_render.py": "mlenv.service.render",
}
SERVICE_VERB_MAY_IMPORT = {"cli", "service", "errors", "contract"}


@pytest.mark.parametrize("m", [m for m in MODULES if m.path in SERVICE_VERBS], ids=lambda m: m.path)
def test_verbs_with_a_service_call_it_not_the_layers_below(m: Module) -> None:
    found = _all_imports(m)
    bad = [
        f"{m.path}:{line}: imports {mod} (a verb with a service imports "
        f"{', '.join(sorted(SERVICE_VERB_MAY_IMPORT))}; move the work into {SERVICE_VERBS[m.path]})"
        for line, mod, _ in found
        if mod.split(".")[0] == "mlenv"
        and len(mod.split(".")) > 1
        and mod.split(".")[1] not in SERVICE_VERB_MAY_IMPORT
    ]
    service, _, name = SERVICE_VERBS[m.path].rpartition(".")
    if not any(
        mod == SERVICE_VERBS[m.path] or (mod == service and name in names)
        for _, mod, names in found
    ):
        bad.append(f"{m.path}: never imports {SERVICE_VERBS[m.path]}")
    assert not bad, "\n".join(bad)


def test_the_service_rules_catch_a_violation() -> None:
    """A service module importing the CLI, or printing, is flagged; so is a verb with a
    service that reaches past it into the platforms and never calls it."""
    planted = Module(
        "mlenv/service/evil.py",
        "service",
        ast.parse(
            "import typer\nfrom mlenv.cli._common import err\n\ndef f():\n    typer.echo('x')\n"
        ),
    )
    with pytest.raises(AssertionError, match="layer 'service' imports mlenv.cli._common"):
        test_imports_follow_the_layering(planted)
    with pytest.raises(AssertionError, match="third-party 'typer'"):
        test_third_party_imports_per_layer(planted)
    with pytest.raises(AssertionError, match="typer.echo"):
        test_only_the_edges_print(planted)
    verb = Module(
        "mlenv/cli/cmd_render.py",
        "cli",
        ast.parse("def render():\n    from mlenv.platforms.dispatch import platform_for\n"),
    )
    with pytest.raises(
        AssertionError,
        match=r"(?s)cmd_render.py:2: imports mlenv.platforms.dispatch.*never imports mlenv.service.render",
    ):
        test_verbs_with_a_service_call_it_not_the_layers_below(verb)
    calls = Module(
        "mlenv/cli/cmd_render.py",
        "cli",
        ast.parse("def render():\n    from mlenv.service import render as service\n"),
    )
    test_verbs_with_a_service_call_it_not_the_layers_below(calls)


def test_the_rules_catch_a_violation(tmp_path: Path) -> None:
    """The checks above are not vacuous: a render module importing the cluster layer,
    printing and starting a process is flagged by each of them."""
    src = "import subprocess\nfrom mlenv.cluster import oc\nimport torch\n\ndef f():\n    print('x')\n    subprocess.run(['ls'])\n"
    m = Module("mlenv/config/evil.py", "config", ast.parse(src))
    with pytest.raises(AssertionError, match="imports mlenv.cluster"):
        test_imports_follow_the_layering(m)
    with pytest.raises(AssertionError, match="third-party 'torch'"):
        test_third_party_imports_per_layer(m)
    with pytest.raises(AssertionError, match="print"):
        test_only_the_edges_print(m)
    with pytest.raises(AssertionError, match="starts a process"):
        test_only_the_runners_start_processes(m)
    named = Module(
        "mlenv/cli/cmd_x.py",
        "cli",
        ast.parse('POD = "ml-dev-env-0"\nf = lambda i: f"ml-dev-env-{i}"\n'),
    )
    with pytest.raises(
        AssertionError, match=r"cmd_x.py:1: 'ml-dev-env-0'(.|\n)*cmd_x.py:2: f'ml-dev-env-"
    ):
        test_object_names_are_typed_in_one_place(named)


# -- the acceptance suite's parts ----------------------------------------------------------
# mlenv/acceptance/<part>/: a part imports only the parts before it in this order (and
# itself); the modules at mlenv/acceptance/ itself (the entry point, the compatibility
# names) may import any part. docs/architecture.md "Where things live" says the same.
ACCEPTANCE_PARTS = ("core", "evidence", "judging", "records", "reports", "checks", "run")
# Compatibility names at mlenv/acceptance/ for scripts synced into pods: nothing in the
# package imports them (it imports what they re-export).
ACCEPTANCE_COMPAT = {
    "mlenv.acceptance.datasets",
    "mlenv.acceptance.data",
    "mlenv.acceptance.models",
}


def _part(path: str) -> str | None:
    parts = path.split("/")
    return parts[2] if parts[:2] == ["mlenv", "acceptance"] and len(parts) > 3 else None


def _all_imports(m: Module) -> list[tuple[int, str, list[str]]]:
    """(line, module, imported names) of every import statement, lazy ones included;
    relative imports resolved against ``m``'s package."""
    pkg = m.path.removesuffix(".py").split("/")
    pkg = pkg[:-1]
    out: list[tuple[int, str, list[str]]] = []
    for n in ast.walk(m.tree):
        if isinstance(n, ast.Import):
            out += [(n.lineno, a.name, []) for a in n.names]
        elif isinstance(n, ast.ImportFrom):
            base = n.module or ""
            if n.level:
                up = pkg[: len(pkg) - (n.level - 1)]
                base = ".".join(up + ([base] if base else []))
            out.append((n.lineno, base, [a.name for a in n.names]))
    return out


@pytest.mark.parametrize("m", [m for m in MODULES if m.layer == "acceptance"], ids=lambda m: m.path)
def test_acceptance_parts_import_only_earlier_parts(m: Module) -> None:
    me = _part(m.path)
    bad = []
    for line, mod, _ in _all_imports(m):
        s = mod.split(".")
        if mod in ACCEPTANCE_COMPAT and m.path not in ("mlenv/acceptance/data.py",):
            bad.append(
                f"{m.path}:{line}: imports the compatibility name {mod} (import what it re-exports)"
            )
        if me is None or s[:2] != ["mlenv", "acceptance"]:
            continue
        if len(s) < 3 or s[2] not in ACCEPTANCE_PARTS:
            bad.append(f"{m.path}:{line}: part {me!r} imports {mod}, which is no part of the suite")
        elif ACCEPTANCE_PARTS.index(s[2]) > ACCEPTANCE_PARTS.index(me):
            bad.append(
                f"{m.path}:{line}: part {me!r} imports {mod} (a later part; order: {', '.join(ACCEPTANCE_PARTS)})"
            )
    assert not bad, "\n".join(bad)


def _package_of(dotted: str, root: Path) -> str:
    """The package that holds ``dotted`` (a module, a package or a name in a module)."""
    parts = dotted.split(".")
    while parts and not (root / Path(*parts)).is_dir():
        parts.pop()
    return ".".join(parts)


@pytest.mark.parametrize("m", MODULES, ids=lambda m: m.path)
def test_no_module_imports_another_packages_internals(m: Module) -> None:
    """``_name`` (a module or a name) is internal to its package: only its own package imports it."""
    own = m.path.rsplit("/", 1)[0].replace("/", ".")
    bad = []
    for line, mod, names in _all_imports(m):
        if not mod.startswith("mlenv"):
            continue
        for dotted in [mod] + [f"{mod}.{n}" for n in names]:
            parts = dotted.split(".")
            private = [
                i for i, x in enumerate(parts) if x.startswith("_") and not x.startswith("__")
            ]
            if private and _package_of(".".join(parts[: private[0] + 1]), PKG.parent) != own:
                bad.append(f"{m.path}:{line}: imports {dotted}, internal to another package")
    assert not bad, "\n".join(bad)


# -- no import cycles --------------------------------------------------------------------------


def import_graph(root: Path, top: str = "mlenv") -> dict[str, set[str]]:
    """Module → the modules it imports, from every import statement under ``root/top``
    (lazy ones inside functions included). Importing a package, or a module inside a
    package the importer is not itself in, counts as importing that package's
    ``__init__`` too, as Python runs it first."""
    files: dict[str, Path] = {}
    for p in sorted((root / top).rglob("*.py")):
        parts = list(p.relative_to(root).with_suffix("").parts)
        files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    graph: dict[str, set[str]] = {name: set() for name in files}
    for name, p in files.items():
        is_pkg = p.name == "__init__.py"
        own = name.split(".") if is_pkg else name.split(".")[:-1]
        ancestors = {".".join(own[:i]) for i in range(1, len(own) + 1)}
        tree = PARSED.get(p) or ast.parse(p.read_text(encoding="utf-8"))
        mod = Module(p.relative_to(root).as_posix(), "", tree)
        for _, target, names in _all_imports(mod):
            hits = [f"{target}.{n}" for n in names if f"{target}.{n}" in files]
            if target in files and len(hits) < len(names) or not names:
                hits.append(target)
            for hit in hits:
                if hit not in files:
                    continue
                graph[name].add(hit)
                s = hit.split(".")
                graph[name] |= {
                    ".".join(s[:i])
                    for i in range(1, len(s))
                    if ".".join(s[:i]) in files and ".".join(s[:i]) not in ancestors
                }
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (or a module importing itself)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in graph[v]:
                found.append(sorted(comp))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(graph) + 100))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles() -> None:
    found = cycles(import_graph(PKG.parent))
    assert not found, "import cycles (every import counts, lazy ones too):\n" + "\n".join(
        " ↔ ".join(c) for c in found
    )


def test_the_cycle_detector_catches_a_planted_cycle(tmp_path: Path) -> None:
    """A cycle through a lazy import and a package ``__init__`` is found; the same tree
    without the lazy import has none (the detector is not vacuous, nor too eager)."""
    pkg = tmp_path / "mlenv"
    (pkg / "a").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a" / "__init__.py").write_text("from mlenv.a import x\n")
    (pkg / "a" / "x.py").write_text(
        "from mlenv.a import y\n"
    )  # inside its own package: no __init__ edge
    (pkg / "a" / "y.py").write_text("X = 1\n")
    (pkg / "b.py").write_text("from mlenv.a.y import X\n")
    assert cycles(import_graph(tmp_path)) == []
    (pkg / "a" / "y.py").write_text("X = 1\n\ndef f():\n    from mlenv import b\n    return b\n")
    assert cycles(import_graph(tmp_path)) == [["mlenv.a", "mlenv.a.x", "mlenv.a.y", "mlenv.b"]]


def test_every_shipped_check_module_is_in_the_registry() -> None:
    """A check module that registers checks but is missing from registry.SHIPPED would never run."""
    reg = next(m for m in MODULES if m.path == "mlenv/acceptance/core/registry.py")
    shipped = next(
        ast.literal_eval(n.value)
        for n in reg.tree.body
        if isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "SHIPPED" for t in n.targets)
    )
    registering = {
        m.path.removesuffix(".py").replace("/", ".")
        for m in MODULES
        if m.path.startswith("mlenv/acceptance/checks/") and "@register" in ast.unparse(m.tree)
    }
    assert registering and registering == set(shipped), (
        f"registering: {sorted(registering)}; SHIPPED: {sorted(shipped)}"
    )


# -- no function over 75 logical lines --------------------------------------------------
# A function's length is its logical lines: each statement's line (a statement the formatter
# wraps over ten physical lines is one) and each comment line. So the rule judges the code,
# not `ruff format`'s line breaks: every function measured the same before and after the tree
# was formatted, and the longest then was 72.
MAX_FUNCTION_LINES = 75


def _logical_line_ends(m: Module) -> list[int]:
    """The line of each logical line's end and of each comment line in ``m``."""
    src = m.source or ast.unparse(m.tree)
    out = []
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type == tokenize.NEWLINE or (
            tok.type == tokenize.COMMENT and tok.line.lstrip().startswith("#")
        ):
            out.append(tok.start[0])
    return out


def function_lengths(m: Module) -> dict[str, int]:
    """``path::Qualified.name`` → logical lines from ``def`` to its last line, for every
    function (methods and nested functions too, each on its own)."""
    ends = _logical_line_ends(m)
    out: dict[str, int] = {}

    def walk(node: ast.AST, prefix: str) -> None:
        for n in ast.iter_child_nodes(node):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                last = n.end_lineno or n.lineno
                out[f"{m.path}::{prefix}{n.name}"] = sum(1 for e in ends if n.lineno <= e <= last)
                walk(n, f"{prefix}{n.name}.")
            elif isinstance(n, ast.ClassDef):
                walk(n, f"{prefix}{n.name}.")

    walk(m.tree, "")
    return out


@pytest.mark.parametrize("m", MODULES, ids=lambda m: m.path)
def test_no_function_over_75_logical_lines(m: Module) -> None:
    bad = [
        f"{name}: {n} lines (at most {MAX_FUNCTION_LINES}; split it)"
        for name, n in function_lengths(m).items()
        if n > MAX_FUNCTION_LINES
    ]
    assert not bad, "\n".join(bad)


def test_the_length_rule_catches_a_long_function() -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    src = f"def f():\n{body}"
    m = Module("mlenv/config/long.py", "config", ast.parse(src), src)
    with pytest.raises(AssertionError, match=r"long.py::f: 76 lines"):
        test_no_function_over_75_logical_lines(m)


def _platform_names() -> frozenset[str]:
    """The names ``cluster.platform`` may take, read from the ``Platform`` Literal of
    ``mlenv/config/model.py`` (where the platforms are defined)."""
    tree = ast.parse((PKG / "config" / "model.py").read_text(encoding="utf-8"))
    for n in tree.body:
        if isinstance(n, ast.Assign) and [ast.unparse(t) for t in n.targets] == ["Platform"]:
            return frozenset(
                c.value
                for c in ast.walk(n.value)
                if isinstance(c, ast.Constant) and isinstance(c.value, str)
            )
    raise AssertionError("mlenv/config/model.py defines no Platform Literal")


PLATFORM_NAMES = _platform_names()
# Where a platform name may be tested: the platforms, and config, which defines the names
# (schema, rules, the traits). Everything else asks ``cfg.traits`` or the Platform object.
PLATFORM_TESTS_AT_HOME = ("mlenv/platforms/", "mlenv/config/")
# path → the comparisons (as ast.unparse writes them) left there, each with why; None: all.
PLATFORM_TESTS_ALLOWED: dict[str, frozenset[str] | None] = {
    # The one left: the re-check CronJob's client (oc or kubectl) and image, until its
    # rewrite asks cfg.traits like the rest of render/.
    "mlenv/render/recheck.py": None,
    # a node's source in the verdicts ("kubernetes", "slurm", "host"), not a platform
    "mlenv/cluster/nodetell.py": frozenset({"n.get('node_from') != 'kubernetes'"}),
    # a rank reads what its launcher exported: it has no config and no Platform object
    "mlenv/acceptance/checks/localize.py": frozenset({"env.get('MLENV_PLATFORM') == 'slurm'"}),
    # the kube tier's control plane flavour (OpenShift's APIs or plain), not a config's
    "mlenv/testing/kube/plane.py": frozenset({"flavor == 'openshift'"}),
}


def _names_platform(e: ast.expr) -> bool:
    """``x.platform`` (not ``sys.platform``, the OS), or a platform name (alone or in a
    tuple/list/set of constants)."""
    if isinstance(e, ast.Attribute):
        return e.attr == "platform" and ast.unparse(e.value) != "sys"
    if isinstance(e, ast.Constant):
        return e.value in PLATFORM_NAMES
    if isinstance(e, (ast.Tuple, ast.List, ast.Set)):
        return any(_names_platform(x) for x in e.elts)
    return False


def _platform_tests(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, source) of each test of a platform name: a comparison with ``x.platform`` or
    a platform name (``cfg.platform == "slurm"``, ``kind in ("slurm", "hosts")``), a
    ``case "slurm":``, or a lookup keyed by ``x.platform`` (``{"slurm": …}[cfg.platform]``)."""
    out = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Compare) and any(map(_names_platform, [n.left, *n.comparators])):
            out.append((n.lineno, ast.unparse(n)))
        elif isinstance(n, ast.MatchValue) and _names_platform(n.value):
            out.append((n.lineno, f"case {ast.unparse(n.value)}"))
        elif (
            isinstance(n, ast.Subscript)
            and isinstance(n.slice, ast.Attribute)
            and n.slice.attr == "platform"
        ):
            out.append((n.lineno, ast.unparse(n)))
    return sorted(out)


@pytest.mark.parametrize("m", MODULES, ids=lambda m: m.path)
def test_no_platform_name_is_tested_outside_the_platforms(m: Module) -> None:
    # a verb calls platform_for(cfg).<verb>(); render and cluster ask cfg.traits
    home = m.path.startswith(PLATFORM_TESTS_AT_HOME)
    allowed = None if home else PLATFORM_TESTS_ALLOWED.get(m.path, frozenset())
    bad = [
        f"{m.path}:{line}: {src}: tests a platform name (ask cfg.traits or the Platform)"
        for line, src in _platform_tests(m.tree)
        if allowed is not None and src not in allowed
    ]
    assert not bad, "\n".join(bad)


def test_the_platform_name_rule_catches_a_comparison() -> None:
    planted = ast.parse(
        'if cfg.platform in ("slurm", "hosts"):\n    pass\n'
        'ok = cfg.name == "x"\n'
        'kube = kind != "kubernetes"\n'
        'root = {"slurm": "s"}[c.platform]\n'
        'match p:\n    case "hosts":\n        pass\n'
        "plain = not cfg.traits.openshift\n"
        'mac = sys.platform == "darwin"\n'
    )
    assert [line for line, _ in _platform_tests(planted)] == [1, 4, 5, 7]
    assert PLATFORM_NAMES == {"openshift", "kubernetes", "slurm", "hosts"}
    m = Module("mlenv/render/new.py", "render", planted)
    with pytest.raises(AssertionError, match=r"new.py:4: kind != 'kubernetes': tests a platform"):
        test_no_platform_name_is_tested_outside_the_platforms(m)
    # at home the same source passes, and an allow-listed comparison passes only as written
    test_no_platform_name_is_tested_outside_the_platforms(
        Module("mlenv/config/new.py", "config", planted)
    )
    other = Module(
        "mlenv/cluster/nodetell.py", "cluster", ast.parse('if n.get("node_from") != "slurm": pass')
    )
    with pytest.raises(AssertionError, match="nodetell.py:1"):
        test_no_platform_name_is_tested_outside_the_platforms(other)


def test_every_allowed_platform_test_is_still_there() -> None:
    # an entry outliving its comparison would let a new one in unseen: drop it instead
    found = {m.path: {src for _, src in _platform_tests(m.tree)} for m in MODULES}
    stale = [
        f"{path}: {', '.join(sorted(want or {'every platform test'}))} is gone (drop it from "
        "PLATFORM_TESTS_ALLOWED)"
        for path, want in PLATFORM_TESTS_ALLOWED.items()
        if not found.get(path) or (want is not None and not want <= found[path])
    ]
    assert not stale, "\n".join(stale)


# -- the workload kind lives behind the Workload seam ----------------------------------------
# Which object runs the worker pods is mlenv/workload/'s to say (docs/architecture.md, "The
# Workload seam"): no other module names the kind ("StatefulSet", its resource
# "statefulsets"), the constant it once had in contract.py, or builds a pod name as
# ``<name>-<ordinal>``; they ask the Workload. mlenv/testing/ is exempt (the fake API server
# plays Kubernetes' own StatefulSet controller), and so is cluster/legacy.py (upstream
# ml-dev-env's objects, whose kinds are fixed by what upstream created). Docstrings and
# comments may mention the kind; code may not.
WORKLOAD_AT_HOME = ("mlenv/workload/", "mlenv/testing/", "mlenv/cluster/legacy.py")
# (module, text) → why that text is no choice of workload
WORKLOAD_TEXT_ALLOWED = {
    ("mlenv/argv.py", "statefulset"): "Kubernetes' naming rule for the kind, whoever uses it",
    ("mlenv/platforms/kube.py", "statefulset"): "the `status -o json` key scripts read",
}
WORKLOAD_KIND_TEXT = re.compile(r"\bstatefulsets?\b", re.IGNORECASE)
WORKLOAD_CONSTANT = "STATEFULSET"
# a pod name built from a workload name and an index: f"{STATEFULSET}-{i}", f"ml-dev-env-{i}"
ORDINAL_NAME_LITERAL = re.compile(r"^ml-dev-env-\d+$")


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the string constants that stand alone as statements (docstrings and the like)."""
    return {
        id(n.value)
        for n in ast.walk(tree)
        if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)
    }


def _ordinal_name(n: ast.JoinedStr) -> bool:
    """``f"{x}-{i}"`` where ``x`` names the workload object, or ``f"ml-dev-env-{i}"``."""
    parts = n.values
    for a, dash, b in zip(parts, parts[1:], parts[2:], strict=False):
        if (
            isinstance(a, ast.FormattedValue)
            and isinstance(dash, ast.Constant)
            and dash.value == "-"
            and isinstance(b, ast.FormattedValue)
            and any(_names_the_workload(x) for x in ast.walk(a.value))
        ):
            return True
    # "ml-dev-env-{i}", alone or as the first label of a DNS name
    head, rest = (parts[0], parts[1:]) if parts else (None, [])
    return (
        isinstance(head, ast.Constant)
        and head.value == "ml-dev-env-"
        and bool(rest)
        and isinstance(rest[0], ast.FormattedValue)
        and (
            len(rest) == 1
            or (isinstance(rest[1], ast.Constant) and str(rest[1].value).startswith("."))
        )
    )


def _names_the_workload(n: ast.AST) -> bool:
    """A name like ``STATEFULSET``, ``pe.statefulset`` or ``sts_name``."""
    word = getattr(n, "id", None) or getattr(n, "attr", None) or ""
    return "statefulset" in word.lower() or "sts" in word.lower().split("_")


def workload_kind_uses(m: Module) -> list[str]:
    """Where ``m`` names the workload kind or builds an ordinal pod name, one line each."""
    docs = _docstrings(m.tree)
    out = []
    for n in ast.walk(m.tree):
        where = f"{m.path}:{getattr(n, 'lineno', '?')}"
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs:
            if (m.path, n.value) in WORKLOAD_TEXT_ALLOWED:
                continue
            if WORKLOAD_KIND_TEXT.search(n.value):
                out.append(f"{where}: {n.value[:60]!r} names the workload kind")
            elif ORDINAL_NAME_LITERAL.match(n.value):
                out.append(f"{where}: {n.value!r} is an ordinal pod name")
        elif isinstance(n, (ast.Name, ast.Attribute)) and WORKLOAD_CONSTANT in (
            getattr(n, "id", None),
            getattr(n, "attr", None),
        ):
            out.append(f"{where}: {WORKLOAD_CONSTANT} (ask mlenv.workload for the name)")
        elif isinstance(n, ast.ImportFrom) and WORKLOAD_CONSTANT in [a.name for a in n.names]:
            out.append(f"{where}: imports {WORKLOAD_CONSTANT} (ask mlenv.workload for the name)")
        elif isinstance(n, ast.JoinedStr) and _ordinal_name(n):
            out.append(f"{where}: {ast.unparse(n)} builds an ordinal pod name")
    return out


@pytest.mark.parametrize("m", MODULES, ids=lambda m: m.path)
def test_no_workload_kind_outside_the_workload_seam(m: Module) -> None:
    if m.path.startswith(WORKLOAD_AT_HOME):
        return
    bad = workload_kind_uses(m)
    assert not bad, "\n".join(b + " (call mlenv.workload's Workload instead)" for b in bad)


def test_the_workload_rule_catches_each_form() -> None:
    """Each form is caught, and a docstring or an unrelated ``f"{a}-{b}"`` is not."""
    src = (
        '"""The StatefulSet\'s pods."""\n'
        'KIND = "StatefulSet"\n'
        'RES = "statefulsets"\n'
        "from mlenv.contract import STATEFULSET\n"
        'pod = f"{STATEFULSET}-{i}"\n'
        'other = f"{sts_name}-{rank}"\n'
        'fixed = "ml-dev-env-0"\n'
        'built = f"ml-dev-env-{i}"\n'
        'fine = f"{cluster}-{rank}"\n'
        'ok = "ml-dev-env-dev"\n'
    )
    found = workload_kind_uses(Module("mlenv/cluster/x.py", "cluster", ast.parse(src)))
    lines = sorted({int(f.split(":")[1]) for f in found})
    assert lines == [2, 3, 4, 5, 6, 7, 8], found
    with pytest.raises(AssertionError, match=r"x.py:2: 'StatefulSet' names the workload kind"):
        test_no_workload_kind_outside_the_workload_seam(
            Module("mlenv/cluster/x.py", "cluster", ast.parse(src))
        )
    # the implementation itself is where the kind lives
    test_no_workload_kind_outside_the_workload_seam(
        Module("mlenv/workload/statefulset.py", "workload", ast.parse(src))
    )
