"""``mlenv stage CLUSTER``: bring what the acceptance job imports to nodes
that cannot download it.

On this machine, a wheelhouse in ``<shared_dir>/.mlenv/wheelhouse/<cluster>/``: a wheel of
mlenv built from its source tree (``pip wheel --no-deps --no-build-isolation``, offline),
and, where the node's python lacks them, PyYAML (a wheel for the node's python, for any
manylinux tag its glibc accepts) and DeepSpeed (its sdist, built on the node against the node's torch, plus its
dependencies but torch as wheels). Then, on one node (``srun -N1``, inside the container
when one is configured; ssh to host 0 on hosts), the node's own python makes
``<shared_dir>/.mlenv/venv/<cluster>`` with ``--system-site-packages`` (the image's torch
stays the one used) and pip installs the wheelhouse into it, from the folder only
(``--no-index``). Runs use that venv's python from then on
(:func:`mlenv.platforms.nodeprobe.node_python`; the batch script checks the same path).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mlenv.config.model import Cluster
from mlenv.errors import InfraError, InputError
from mlenv.platforms import nodeprobe

Say = Callable[[str], None]
STAGE_TIMEOUT_S = 1800.0  # srun's wait + pip (building DeepSpeed's sdist on the node takes minutes)
# DeepSpeed computes its requirements when its sdist is built, so they are listed here (those
# of 0.14-0.19 but torch, which the node has); pip on the node skips what the image has.
DEEPSPEED_DEPS = (
    "einops",
    "hjson",
    "msgpack",
    "ninja",
    "numpy",
    "packaging>=20.0",
    "psutil",
    "py-cpuinfo",
    "pydantic>=2.0.0",
    "tqdm",
)
DEEPSPEED_VERSION = "0.19.8"  # when this machine has none to match

# Run by the node's python: argv = venv, wheelhouse, mlenv's wheel, requirements to resolve
# from the wheelhouse (DeepSpeed, PyYAML). A python that is itself a venv or conda env has
# more than its base's site-packages: the new venv gets those folders too (a .pth file).
NODE_SCRIPT = r"""
import json, os, subprocess, sys
venv, wheelhouse, wheel, reqs = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
subprocess.run([sys.executable, '-m', 'venv', '--clear', '--system-site-packages', '--without-pip', venv],
               check=True)
py = os.path.join(venv, 'bin', 'python')
def ask(code):
    return json.loads(subprocess.run([py, '-c', code], capture_output=True, text=True, check=True).stdout)
seen = ask('import sys, json; print(json.dumps(sys.path))')
extra = [p for p in sys.path if p and os.path.isdir(p) and p not in seen]
if extra:
    # site-packages folders through site.addsitedir, which also reads their own .pth files
    # (an image's paths); any other folder a .pth added to the node's path as it is
    purelib = ask('import sysconfig, json; print(json.dumps(sysconfig.get_paths()["purelib"]))')
    with open(os.path.join(purelib, '_mlenv_node_python.pth'), 'w') as f:
        for p in extra:
            site_dir = os.path.basename(p) in ('site-packages', 'dist-packages')
            f.write(('import site; site.addsitedir(%r)' % p if site_dir else p) + '\n')
    missing = [p for p in extra if p not in ask('import sys, json; print(json.dumps(sys.path))')]
    if missing:
        sys.exit('the venv lost %s of the node python\'s path' % ', '.join(missing))
pip = [py, '-m', 'pip', 'install', '--no-index', '--find-links', wheelhouse, '--disable-pip-version-check',
       '--no-warn-script-location']
if subprocess.run([py, '-m', 'pip', '--version'], capture_output=True).returncode != 0:
    subprocess.run([py, '-m', 'ensurepip', '--default-pip'], check=True)
subprocess.run([*pip, '--no-deps', os.path.join(wheelhouse, wheel)], check=True)
if reqs:
    subprocess.run([*pip, '--no-build-isolation', *reqs], check=True)
print('staged', py)
"""


def _paths(cluster: Cluster) -> tuple[Path, str]:
    """(the wheelhouse on this machine, the venv on the nodes); InputError without a shared folder."""
    if cluster.platform not in ("slurm", "hosts"):
        raise InputError(
            f"mlenv stage: platform {cluster.platform} runs the image's own mlenv; staging is for "
            "platform slurm and hosts"
        )
    if not nodeprobe.shared_dir(cluster):
        raise InputError(
            f"{cluster.source}: hosts.shared_dir is empty: mlenv stage puts the wheelhouse and the "
            "venv on a filesystem every host sees (copying them to each host is not implemented yet)"
        )
    return nodeprobe.staged_root(cluster) / "wheelhouse" / cluster.name, nodeprobe.venv_dir(cluster)


def source_tree() -> Path:
    """The checkout this mlenv runs from (its ``pyproject.toml`` names ml-dev-env)."""
    import mlenv

    root = Path(mlenv.__file__).resolve().parent.parent
    try:
        ok = 'name = "ml-dev-env"' in (root / "pyproject.toml").read_text(encoding="utf-8")
    except OSError:
        ok = False
    if not ok:
        raise InputError(
            f"mlenv stage builds mlenv's wheel from its source tree; this mlenv runs from {root}, "
            "which has no ml-dev-env pyproject.toml: run mlenv stage from a checkout"
        )
    return root


def pip_words(*args: str) -> list[str]:
    return [sys.executable, "-m", "pip", "--disable-pip-version-check", *args]


def wheelhouse_commands(wheelhouse: Path, src: Path, found: dict[str, Any]) -> list[list[str]]:
    """The pip commands that fill ``wheelhouse``: mlenv's wheel from ``src`` (a copy of the
    tree), then what ``found`` (the node's probe) says is missing, for the node's python."""
    cmds = [
        pip_words(
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--wheel-dir",
            str(wheelhouse),
            str(src),
        )
    ]
    missing = set(found.get("missing") or {})
    binary = [
        *(["pyyaml"] if "yaml" in missing else []),
        *(DEEPSPEED_DEPS if "deepspeed" in missing else ()),
    ]
    if binary:
        ver = "".join(str(found.get("python", "3")).split(".")[:2])
        tags = platform_tags(str(found.get("glibc") or ""), str(found.get("machine") or "x86_64"))
        cmds.append(
            pip_words(
                "download",
                "--only-binary=:all:",
                f"--python-version={ver}",
                *(f"--platform={t}" for t in tags),
                "--implementation=cp",
                "--dest",
                str(wheelhouse),
                "--",
                *binary,
            )
        )
    if "deepspeed" in missing:
        cmds.append(
            pip_words(
                "download",
                "--no-deps",
                "--no-binary=:all:",
                "--dest",
                str(wheelhouse),
                "--",
                f"deepspeed=={_local_deepspeed() or DEEPSPEED_VERSION}",
            )
        )
    return cmds


# The oldest glibc a manylinux wheel of each architecture may ask for (PEP 600: manylinux1
# and manylinux2010 were x86 only; manylinux2014, glibc 2.17, added the others).
_OLDEST = {"x86_64": 5, "i686": 5}
_LEGACY = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}


def platform_tags(glibc: str, arch: str) -> list[str]:
    """Every manylinux tag a node with ``glibc`` (``2.35``) on ``arch`` accepts, newest first,
    as pip on the node would (PEP 600, with the legacy aliases): a wheel built for an older
    glibc runs on a newer one, and ``pip download --platform`` takes each of them; one exact
    tag found no msgpack or PyYAML wheel for Ubuntu 22.04's 2.35. An unknown glibc counts as
    2.17 (manylinux2014's)."""
    major, _, minor = glibc.partition(".")
    top = int(minor) if major == "2" and minor.isdigit() else 17
    tags = []
    for m in range(top, _OLDEST.get(arch, 17) - 1, -1):
        tags.append(f"manylinux_2_{m}_{arch}")
        if m in _LEGACY and (m == 17 or arch in _OLDEST):
            tags.append(f"{_LEGACY[m]}_{arch}")
    return tags


def _local_deepspeed() -> str | None:
    """This machine's DeepSpeed version (the node gets the same), without importing it."""
    from importlib import metadata

    try:
        return metadata.version("deepspeed")
    except metadata.PackageNotFoundError:
        return None


def requirements(found: dict[str, Any]) -> list[str]:
    """What pip on the node resolves from the wheelhouse besides mlenv."""
    missing = set(found.get("missing") or {})
    return [
        *(["pyyaml"] if "yaml" in missing else []),
        *(["deepspeed"] if "deepspeed" in missing else []),
    ]


def build_wheelhouse(wheelhouse: Path, found: dict[str, Any], say: Say) -> str:
    """Fill ``wheelhouse`` (emptied first: it is mlenv's); the name of mlenv's wheel."""
    src = source_tree()
    shutil.rmtree(wheelhouse, ignore_errors=True)
    wheelhouse.mkdir(parents=True)
    with tempfile.TemporaryDirectory(prefix="mlenv-stage-") as tmp:
        # a copy: setuptools writes build/ and *.egg-info into the tree it builds
        copy = Path(tmp) / "src"
        copy.mkdir()
        for name in ("pyproject.toml", "README.md", "LICENSE"):
            if (src / name).is_file():
                shutil.copy2(src / name, copy / name)
        shutil.copytree(
            src / "mlenv", copy / "mlenv", ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
        )
        for words in wheelhouse_commands(wheelhouse, copy, found):
            say(f"stage: {' '.join(words[1:4])} … ({words[4] if len(words) > 4 else ''})")
            r = subprocess.run(
                words,
                capture_output=True,
                text=True,
                timeout=900,
                check=False,
                stdin=subprocess.DEVNULL,
            )
            if r.returncode != 0:
                last = (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1]
                raise InfraError(f"stage: {' '.join(words[2:4])} failed on this machine: {last}")
    wheels = sorted(p.name for p in wheelhouse.glob("ml_dev_env-*.whl"))
    if not wheels:
        raise InfraError(f"stage: pip wheel left no ml_dev_env wheel in {wheelhouse}")
    return wheels[-1]


def _probe(cluster: Cluster, python: str) -> dict[str, Any]:
    """The probe on one node with ``python``; InfraError when it cannot run."""
    if cluster.platform == "slurm":
        from mlenv.platforms import slurm

        found = nodeprobe.slurm_probe(
            cluster,
            python,
            slurm._run,
            slurm.srun_options(cluster, 0),
            immediate=int(STAGE_TIMEOUT_S),
        )
        if found is None:
            raise InfraError(f"stage: no node of {nodeprobe.partition_words(cluster)} became free")
        return found
    from mlenv.platforms import hosts

    v = hosts.probe_with(cluster, hosts.hosts_of(cluster, None)[0], python)
    if isinstance(v, str):
        raise InfraError(f"stage: host {cluster.gpu_nodes[0]}: {v}")
    return v


def _on_node(cluster: Cluster, command: list[str]) -> subprocess.CompletedProcess[str]:
    if cluster.platform == "slurm":
        from mlenv.platforms import slurm

        words = nodeprobe.srun_words(
            cluster,
            slurm.srun_options(cluster, 0),
            command,
            immediate=int(STAGE_TIMEOUT_S),
            minutes=30,
        )
    else:
        from mlenv.platforms import hosts

        words = hosts.ssh_words(cluster, hosts.hosts_of(cluster, None)[0], command)
    try:
        return subprocess.run(
            words,
            capture_output=True,
            text=True,
            timeout=STAGE_TIMEOUT_S,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except FileNotFoundError:
        raise InfraError(f"{words[0]}: not found") from None
    except subprocess.TimeoutExpired:
        raise InfraError(f"stage: the node did not finish within {STAGE_TIMEOUT_S:g} s") from None


def stage(cluster: Cluster, say: Say) -> str:
    """Wheelhouse here, venv on the nodes, then the probe through the venv; the summary line.
    InfraError (exit 3) naming what failed where; InputError (exit 2) for a config it cannot serve."""
    wheelhouse, venv = _paths(cluster)
    python = nodeprobe.configured_python(cluster)
    found = _probe(cluster, python)
    if "torch" in (found.get("missing") or {}):
        raise InfraError(
            nodeprobe.missing_line(
                cluster, f"node {found.get('node', '?')}", found, stopped="nothing was staged"
            )
            or "torch is missing"
        )
    say(
        f"stage: node {found.get('node', '?')}: {found.get('executable')} (python {found.get('python')}, torch "
        f"{found.get('torch')}) lacks {', '.join(found.get('missing') or {}) or 'nothing'}"
    )
    wheel = build_wheelhouse(wheelhouse, found, say)
    say(
        f"stage: wheelhouse {wheelhouse}: {', '.join(sorted(p.name for p in wheelhouse.iterdir()))}"
    )
    r = _on_node(
        cluster, [python, "-c", NODE_SCRIPT, venv, str(wheelhouse), wheel, *requirements(found)]
    )
    if r.returncode != 0:
        last = ((r.stderr or r.stdout).strip().splitlines() or [f"exit {r.returncode}"])[-1]
        raise InfraError(f"stage: making {venv} on the node with {python} failed: {last}")
    after = _probe(cluster, f"{venv}/bin/python")
    line = nodeprobe.missing_line(
        cluster, f"node {after.get('node', '?')}", after, stopped="the venv is incomplete"
    )
    if line:
        raise InfraError(line)
    return (
        f"staged {venv} (python {after.get('python')}, torch {after.get('torch')}, deepspeed "
        f"{after.get('deepspeed')}, mlenv from {wheel}); runs on {cluster.name} use it from now on"
    )
