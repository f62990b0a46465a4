"""The layering of docs/architecture.md, enforced: who may import whom, who may print,
who may start processes, and where heavy libraries may be imported at module level.

Read from the source with ``ast`` (nothing is imported), so a new violation fails here
with the file and line instead of surfacing as a slow ``mlenv --help`` or a pod image
that cannot import a module. Changing a rule means changing docs/architecture.md too.
"""

from __future__ import annotations

import ast
import re
import sys
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
    "config": {"errors", "contract", "argv"},
    "render": {"config", "errors", "contract", "argv"},
    "generated": {"render"},
    # The sign-off bundle's operator-side parts: the run's cluster, config, deployed trees.
    "signoff": {"errors", "contract", "config", "render", "acceptance"},
    "platforms": {"config", "render", "errors", "contract", "argv", "generated", "acceptance"},
    "cluster": {"config", "render", "errors", "contract", "argv", "generated"},
    # Runs inside pods from the package alone: never the operator-side layers.
    "pod": {"errors", "contract", "argv"},
    # Also inside pods; reads options/baselines with the config layer's strict YAML loader
    # and counts GPUs like pod-init does.
    "acceptance": {"errors", "contract", "config", "pod"},
    # Test support, not in the wheel: the fake cluster, fake kubectl, fake_mlenv (runs the CLI).
    "testing": {"config", "render", "errors", "contract", "argv", "cluster", "cli"},
    "cli": {"*"},
    "__init__": set(),
    "__main__": {"cli"},
}

# Third-party packages each layer may import at all (stdlib is always fine).
THIRD_PARTY: dict[str, set[str]] = {
    "errors": set(), "argv": set(), "contract": set(), "__init__": set(), "__main__": set(),
    "config": {"yaml", "jsonschema"},
    "render": {"yaml", "jsonschema", "jinja2", "referencing", "kubernetes_validate"},
    "generated": set(),
    "signoff": set(),
    "platforms": {"yaml", "jinja2"},
    "cluster": {"openshift_client", "yaml"},
    "pod": set(),  # the pod image's Python may have nothing but the stdlib
    "acceptance": {"torch", "deepspeed", "numpy", "matplotlib", "yaml"},
    "testing": {"yaml"},
    "cli": {"typer", "click", "yaml"},
}

# Libraries that cost seconds to import: only inside the functions that need them, so
# `mlenv --help` and every verb that does not measure anything start fast.
HEAVY = {"torch", "deepspeed", "numpy", "matplotlib", "openshift_client", "jsonschema", "jinja2",
         "kubernetes_validate", "referencing"}
# Where a module-level heavy import is fine: modules only ever imported in the ranks, or
# already behind a function-level import in every caller.
HEAVY_OK_PREFIXES = ("mlenv/acceptance/", "mlenv/render/", "mlenv/config/schema.py",
                     "mlenv/config/docs.py", "mlenv/cluster/oc.py")

# Who may write to the terminal: the CLI, the in-pod entry points, and the acceptance
# ranks' console (rank 0 prints the live lines and the verdict, as nccl-tests does).
MAY_PRINT = ("mlenv/cli/", "mlenv/pod/__main__.py", "mlenv/pod/runtime.py", "mlenv/acceptance/__main__.py",
             "mlenv/acceptance/reports/console.py", "mlenv/acceptance/checks/collectives.py",
             "mlenv/config/docs.py", "mlenv/testing/kubectl_cli.py", "mlenv/testing/fake_mlenv.py")
PRINT_CALLS = {"print", "typer.echo", "click.echo", "sys.stdout.write", "sys.stderr.write"}

# Who may start processes: the cluster client and key generation, the pod runtime, the
# acceptance launcher and environment probes, the Slurm/hosts drivers. Never the CLI
# (a verb parses, calls and prints), config or render.
MAY_SPAWN = ("mlenv/cluster/oc.py", "mlenv/cluster/keys.py", "mlenv/pod/", "mlenv/acceptance/",
             "mlenv/platforms/", "mlenv/testing/")
SPAWN_PREFIXES = ("subprocess.", "os.exec", "os.spawn", "asyncio.create_subprocess")
SPAWN_CALLS = {"os.system", "os.popen", "os.fork", "os.posix_spawn", "os.posix_spawnp", "pty.spawn", "Popen"}


@dataclass(frozen=True)
class Module:
    path: str  # relative, e.g. mlenv/cluster/oc.py
    layer: str
    tree: ast.Module


def _modules() -> list[Module]:
    out = []
    for p in sorted(PKG.rglob("*.py")):
        rel = p.relative_to(PKG.parent).as_posix()
        parts = p.relative_to(PKG).parts
        layer = parts[0] if len(parts) > 1 else parts[0].removesuffix(".py")
        out.append(Module(rel, layer, ast.parse(p.read_text(encoding="utf-8"), rel)))
    return out


MODULES = _modules()


def _imports(m: Module) -> list[tuple[int, str, bool]]:
    """(line, module, at module level) for every import in ``m``."""
    top = {id(n) for n in m.tree.body}
    for stmt in m.tree.body:  # `if TYPE_CHECKING:` / try blocks at module level count as module level
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
            bad.append(f"{m.path}:{line}: layer {m.layer!r} imports {mod} (allowed: {sorted(allowed) or 'none'})")
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
            bad.append(f"{m.path}:{line}: {top!r} imported at module level (import it inside the function)")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("m", MODULES, ids=lambda m: m.path)
def test_only_the_edges_print(m: Module) -> None:
    if m.path.startswith(MAY_PRINT):
        return
    bad = [f"{m.path}:{line}: {name}(...) outside the CLI/console (return text or take a `say` callback)"
           for line, name in _calls(m) if name in PRINT_CALLS]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("m", MODULES, ids=lambda m: m.path)
def test_only_the_runners_start_processes(m: Module) -> None:
    if m.path.startswith(MAY_SPAWN):
        return
    bad = [f"{m.path}:{line}: {name}(...) starts a process outside the layers allowed to"
           for line, name in _calls(m) if name in SPAWN_CALLS or name.startswith(SPAWN_PREFIXES)]
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
        elif isinstance(n, ast.Constant) and isinstance(n.value, str) and OBJECT_NAME.match(n.value):
            out.append((n.lineno, repr(n.value)))
    return out


@pytest.mark.parametrize("m", MODULES, ids=lambda m: m.path)
def test_object_names_are_typed_in_one_place(m: Module) -> None:
    if m.path in NAMES_AT_HOME:
        return
    bad = [f"{m.path}:{line}: {text}: use the name from mlenv/contract.py or mlenv/render/names.py"
           for line, text in _name_literals(m)]
    assert not bad, "\n".join(bad)


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
    named = Module("mlenv/cli/cmd_x.py", "cli", ast.parse('POD = "ml-dev-env-0"\nf = lambda i: f"ml-dev-env-{i}"\n'))
    with pytest.raises(AssertionError, match=r"cmd_x.py:1: 'ml-dev-env-0'(.|\n)*cmd_x.py:2: f'ml-dev-env-"):
        test_object_names_are_typed_in_one_place(named)
