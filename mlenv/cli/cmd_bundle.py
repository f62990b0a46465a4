"""``mlenv bundle RUN_DIR`` writes a run's sign-off bundle; ``mlenv bundle verify FILE`` checks one.

The bundle (layout in docs/acceptance.md) holds the report folder, the cluster config
with its sha256, the rendered manifests with their sha256 and whether each matches a
fresh ``render`` (as ``render --check`` would say), the baseline with every threshold's
source, the versions seen per node, and a MANIFEST of every file's sha256.
Exit: 0 written / verified, 1 the bundle does not verify (each bad file named),
2 bad input (no such run folder or file, unknown cluster).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from mlenv.cli._common import err, guarded, repo_root
from mlenv.errors import EXIT_FAIL, InputError


def _record(report_dir: Path) -> dict[str, Any]:
    """The run's history line (record.json) when it belongs to this run, else {}."""
    from mlenv.acceptance.history import RECORD_FILE

    try:
        rec = json.loads((report_dir / RECORD_FILE).read_text(encoding="utf-8"))
        doc = json.loads((report_dir / "results.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return rec if isinstance(rec, dict) and rec.get("run_id") == doc.get("run_id") else {}


def deployment_for(cluster: str, root: Path, modes: tuple[str, ...] | None) -> \
        tuple[tuple[str, bytes], dict[str, Any], dict[str, bytes]]:
    """(config file, deployment index, archive path → manifest) for a cluster run.

    Each file of ``k8s/<cluster>/<mode>/`` is compared with a fresh render of the config:
    ``matches``, ``differs``, ``not rendered`` (extra in the tree) or ``missing`` (rendered,
    not in the tree). A config that does not validate is bundled as it is, unrendered.
    """
    from mlenv.acceptance.bundle import sha256_bytes
    from mlenv.config import loader
    from mlenv.errors import ConfigError
    from mlenv.render.tree import MODES, out_dir, render_tree

    path = loader.resolve(cluster, root)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise InputError(f"{path}: cannot read the cluster config: {e.strerror or e}") from None
    shown = path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path)
    deployment: dict[str, Any] = {
        "deployed": None,
        "note": (f"the manifests in k8s/{cluster}/<mode>/ when the bundle was made: mlenv deploy applies what "
                 "mlenv render produces, and matches_render says whether they equal a fresh render of the "
                 "bundled config (what `mlenv render --check` checks)"),
        "trees": [],
    }
    files: dict[str, bytes] = {}
    try:
        c = loader.load(path, root)
    except (ConfigError, InputError) as e:
        deployment["note"] = f"{shown} does not validate, so nothing was rendered to compare: {e}"
        return (shown, data), deployment, files
    trees: list[tuple[str, Path, dict[str, str]]] = []
    if getattr(c, "platform", "openshift") in ("slurm", "hosts"):  # scripts under slurm/<name>/, hosts/<name>/
        from mlenv.render.platforms import planned

        d, fresh = planned(root, c)
        trees.append((str(c.platform), d, fresh))
        deployment["note"] = deployment["note"].replace(f"k8s/{cluster}/<mode>/", f"{c.platform}/{c.name}/")
    else:
        for mode in modes or MODES:
            d = out_dir(root / "k8s", c, mode)  # type: ignore[arg-type]
            trees.append((mode, d, render_tree(c, mode) if d.is_dir() else {}))  # type: ignore[arg-type]
    for label, d, fresh in trees:
        rel = d.relative_to(root).as_posix() if d.is_relative_to(root) else str(d)
        tree: dict[str, Any] = {"mode": label, "dir": rel, "present": d.is_dir(), "files": []}
        deployment["trees"].append(tree)
        if not d.is_dir():
            tree["matches_render"] = False
            continue
        on_disk = {p.name: p for p in sorted(d.iterdir()) if p.is_file() and not p.is_symlink()}
        for name in sorted(set(on_disk) | set(fresh)):
            entry: dict[str, Any] = {"name": name}
            if name in on_disk:
                content = on_disk[name].read_bytes()
                arc = f"deployed/{label}/{name}"
                files[arc] = content
                entry.update(path=arc, sha256=sha256_bytes(content))
                want = fresh.get(name)
                entry["state"] = ("not rendered" if want is None else
                                  "matches" if want.encode("utf-8") == content else "differs")
            else:
                entry["state"] = "missing"
            tree["files"].append(entry)
        tree["matches_render"] = all(f["state"] == "matches" for f in tree["files"])
    return (shown, data), deployment, files


def make_bundle(report_dir: Path, out: Path | None = None, cluster: str | None = None,
                mode: str | None = None, root: Path | None = None) -> tuple[Path, dict[str, Any]]:
    """Bundle the run in ``report_dir`` (also what ``mlenv acceptance --bundle`` calls)."""
    from mlenv.acceptance import bundle
    from mlenv.acceptance.compare import Run, baseline_of
    from mlenv.acceptance.history import LOCAL_CLUSTER, check_cluster_name

    root = root or Path(repo_root())
    if not (report_dir / "results.json").is_file():
        raise InputError(f"{report_dir}: no results.json (not a report folder of a finished run)")
    rec = _record(report_dir)
    name = check_cluster_name(cluster or str(rec.get("cluster") or LOCAL_CLUSTER))
    local_run = cluster is None and (not rec or rec.get("origin") == "local")
    try:
        doc = json.loads((report_dir / "results.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise InputError(f"{report_dir}/results.json: unreadable: {e}") from None
    base = baseline_of(Run(ref=str(report_dir), doc=doc, results=[]))
    config: tuple[str, bytes] | None = None
    deployment: dict[str, Any] | None = None
    files: dict[str, bytes] | None = None
    if not local_run:
        try:
            config, deployment, files = deployment_for(name, root, (mode,) if mode else None)
        except InputError as e:
            if cluster is not None:  # asked for by name: a typo must not pass silently
                raise
            deployment = {"deployed": None, "trees": [],
                          "note": f"the run's cluster config is not here, so neither it nor manifests are included: {e}"}
    try:
        return bundle.build(report_dir, out, cluster=name, config=config, deployment=deployment,
                            deployed_files=files, baseline=base)
    except bundle.BundleError as e:
        raise InputError(str(e)) from None


@guarded
def bundle_cmd(
    target: Annotated[str, typer.Argument(help="RUN_DIR (a report folder), or 'verify'.", metavar="RUN_DIR|verify")],
    file: Annotated[str | None, typer.Argument(help="With 'verify': the bundle to check.", metavar="[FILE]")] = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Archive path (default RUN_DIR/mlenv-bundle-<run id>.tar.gz).")] = None,
    cluster: Annotated[str | None, typer.Option("--cluster", help="Cluster whose config and k8s/ tree to include "
                                                                  "(default: the run's, from its record.json).")] = None,
    mode: Annotated[str | None, typer.Option("--mode", help="rdma or tcp: only that tree (default: both).")] = None,
) -> None:
    """Write a run's sign-off bundle, or verify one (mlenv bundle verify FILE: exit 0 ok, 1 naming each bad file)."""
    if target == "verify":
        if file is None:
            raise InputError("mlenv bundle verify FILE: give the bundle to check")
        _verify(Path(file))
        return
    if file is not None:
        raise InputError(f"unexpected argument {file!r}: mlenv bundle RUN_DIR, or mlenv bundle verify FILE")
    if mode is not None and mode not in ("rdma", "tcp"):
        raise InputError(f"--mode must be rdma or tcp, got {mode!r}")
    report_dir = Path(target)
    if not report_dir.is_dir():
        raise InputError(f"{target}: no such report folder")
    path, index = make_bundle(report_dir, out, cluster, mode)
    for note in index.get("left_out", []):
        err(f"note: {note}")
    from mlenv.acceptance.bundle import manifest_sha256

    typer.echo(f"bundle: {path} ({index['verdict']}, run {index['run_id']}, cluster {index['cluster']})")
    typer.echo(f"MANIFEST sha256: {manifest_sha256(path)} (send it to the reviewer by a second channel)")


def _verify(path: Path) -> None:
    from mlenv.acceptance.bundle import verify

    if not path.is_file():
        raise InputError(f"{path}: no such file")
    problems = verify(path)
    for p in problems:
        err(p)
    if problems:
        err(f"{path}: does NOT verify ({len(problems)} problem(s))")
        raise typer.Exit(EXIT_FAIL)
    from mlenv.acceptance.bundle import manifest_sha256

    typer.echo(f"{path}: OK, every file matches its MANIFEST sha256")
    typer.echo(f"MANIFEST sha256: {manifest_sha256(path)} (compare it with the one the sender gave you)")


def register(app: typer.Typer) -> None:
    """Add ``bundle`` to the app."""
    app.command("bundle")(bundle_cmd)
