"""The sign-off bundle of a finished run: what goes into it besides the report folder.

``mlenv.acceptance.records.bundle`` packs and verifies the archive; this module gathers the
operator-side parts it cannot see from inside the ranks: which cluster the run belongs
to (its history record), that cluster's config, and each deployed tree compared file by
file with a fresh render of the config (``matches``, ``differs``, ``not rendered``,
``missing``: what ``mlenv render --check`` would say). The CLI's ``bundle`` verb and
``acceptance --bundle`` call :func:`make_bundle`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mlenv.contract import RESULTS_JSON, loads_bounded, read_regular, read_results
from mlenv.contract import shown as shown_value
from mlenv.errors import InputError


def _record(report_dir: Path, doc: dict[str, Any]) -> dict[str, Any]:
    """The run's history line (record.json) when it belongs to the run ``doc`` describes, else {}."""
    from mlenv.acceptance.records.history import RECORD_FILE

    try:
        rec = loads_bounded(read_regular(report_dir / RECORD_FILE))
    except (OSError, ValueError):
        return {}
    return rec if isinstance(rec, dict) and rec.get("run_id") == doc.get("run_id") else {}


def deployment_for(
    cluster: str, root: Path, modes: tuple[str, ...] | None
) -> tuple[tuple[str, bytes], dict[str, Any], dict[str, bytes]]:
    """(config file, deployment index, archive path → manifest) for a cluster run.

    Each file of ``k8s/<cluster>/<mode>/`` is compared with a fresh render of the config:
    ``matches``, ``differs``, ``not rendered`` (extra in the tree) or ``missing`` (rendered,
    not in the tree). A config that does not validate is bundled as it is, unrendered.
    """
    from mlenv.acceptance.records.bundle import sha256_bytes
    from mlenv.config import loader
    from mlenv.errors import ConfigError
    from mlenv.render.tree import MODES, out_dir, render_tree

    path = loader.resolve(cluster, root)  # a link in clusters/ is refused here
    data = loader.read_capped(
        path
    )  # the loader's cap: a config that never ends must not hang the bundle
    shown = path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path)
    deployment: dict[str, Any] = {
        "deployed": None,
        "note": (
            f"the manifests in k8s/{cluster}/<mode>/ when the bundle was made: mlenv deploy applies what "
            "mlenv render produces, and matches_render says whether they equal a fresh render of the "
            "bundled config (what `mlenv render --check` checks)"
        ),
        "trees": [],
    }
    files: dict[str, bytes] = {}
    try:
        c = loader.load(path, root)
    except (ConfigError, InputError) as e:
        deployment["note"] = f"{shown} does not validate, so nothing was rendered to compare: {e}"
        return (shown, data), deployment, files
    trees: list[tuple[str, Path, dict[str, str]]] = []
    deployment["platform"] = c.platform
    if c.traits.folder:  # scripts under slurm/<name>/, hosts/<name>/
        from mlenv.render.platforms import planned

        d, fresh = planned(root, c)
        trees.append((c.platform, d, fresh))
        deployment["note"] = deployment["note"].replace(
            f"k8s/{cluster}/<mode>/", f"{c.traits.folder}/{c.name}/"
        )
    else:
        for mode in (m for m in MODES if not modes or m in modes):
            d = out_dir(root / "k8s", c, mode)
            trees.append((mode, d, render_tree(c, mode) if d.is_dir() else {}))
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
                entry["state"] = (
                    "not rendered"
                    if want is None
                    else "matches"
                    if want.encode("utf-8") == content
                    else "differs"
                )
            else:
                entry["state"] = "missing"
            tree["files"].append(entry)
        tree["matches_render"] = all(f["state"] == "matches" for f in tree["files"])
    return (shown, data), deployment, files


def make_bundle(
    report_dir: Path,
    root: Path,
    out: Path | None = None,
    cluster: str | None = None,
    mode: str | None = None,
    asked: str | None = None,
    allow_skipped: bool = False,
) -> tuple[Path, dict[str, Any]]:
    """Bundle the run in ``report_dir`` (``mlenv bundle`` and ``mlenv acceptance --bundle``).

    ``root`` holds ``clusters/`` and the generated trees. A run of a cluster (not
    ``--local``) includes its config and deployed trees; when the config is not here the
    bundle says so instead, unless ``cluster`` named it (then a typo is an InputError).
    ``asked``: the run id the folder must hold (``mlenv bundle RUN_ID``); a folder holding
    another run than it names is refused either way (``rundir.check_folder``). A SKIPPED
    run (nothing measured) is refused unless ``allow_skipped``: a bundle is a sign-off.
    """
    from mlenv.acceptance.records import bundle
    from mlenv.acceptance.records.compare import Run, baseline_of
    from mlenv.acceptance.records.history import LOCAL_CLUSTER, check_cluster_name

    if cluster is not None:
        check_cluster_name(cluster)
    if not (report_dir / RESULTS_JSON).is_file():
        if any((report_dir / f).is_file() for f in ("run.json", "results.jsonl")):
            raise InputError(
                f"{report_dir}: the run was never finalised (its processes were killed before the "
                f"report was written): run `mlenv finalize {report_dir}` first"
            )
        raise InputError(f"{report_dir}: no {RESULTS_JSON} (not a report folder of a finished run)")
    doc = read_results(report_dir)  # read once: _record matches its run id against it
    rec = _record(report_dir, doc or {})
    ran_here = (
        rec.get("origin") == "local" or rec.get("cluster") == LOCAL_CLUSTER
    )  # record.json says so
    # `--cluster X` of a run that ran here must not label it X's: the bundle names what ran
    # and carries X's config and manifests for reference only
    name = check_cluster_name(
        LOCAL_CLUSTER if ran_here else cluster or str(rec.get("cluster") or LOCAL_CLUSTER)
    )
    local_run = cluster is None and (not rec or ran_here)
    if doc is None:
        raise InputError(f"{report_dir}/{RESULTS_JSON}: unreadable (not a JSON object)")
    from mlenv.acceptance.records.rundir import check_folder

    check_folder(report_dir, doc, asked)
    if doc.get("verdict") == "SKIPPED" and not allow_skipped:
        raise InputError(
            f"{report_dir}: run {shown_value(doc.get('run_id'))} is SKIPPED (no check measured "
            "anything): nothing to sign off; --allow-skipped bundles it anyway"
        )
    base = baseline_of(Run(ref=str(report_dir), doc=doc, results=[]))
    config: tuple[str, bytes] | None = None
    deployment: dict[str, Any] | None = None
    files: dict[str, bytes] | None = None
    if not local_run:
        try:
            config, deployment, files = deployment_for(
                cluster or name, root, (mode,) if mode else None
            )
        except InputError as e:
            if cluster is not None:  # asked for by name: a typo must not pass silently
                raise
            deployment = {
                "deployed": None,
                "trees": [],
                "note": f"the run's cluster config is not here, so neither it nor manifests are included: {e}",
            }
    if ran_here and cluster is not None and cluster != LOCAL_CLUSTER and deployment is not None:
        deployment["note"] = (
            f"for reference only: run {doc.get('run_id')} ran on this machine (mlenv acceptance "
            f"--local), not on cluster {cluster}; {deployment['note']}"
        )
    ran = what_ran(doc, rec, deployment)
    try:
        return bundle.build(
            report_dir,
            out,
            cluster=name,
            config=config,
            deployment=deployment,
            deployed_files=files,
            baseline=base,
            ran=ran,
        )
    except bundle.BundleError as e:
        raise InputError(str(e)) from None


def what_ran(
    doc: dict[str, Any], rec: dict[str, Any], deployment: dict[str, Any] | None
) -> dict[str, Any]:
    """bundle.json's ``ran``: where and on what the run actually ran, from its own results.json
    and record.json (never from ``--cluster``, which only picks the config to include)."""
    raw = doc.get("world")
    world: dict[str, Any] = raw if isinstance(raw, dict) else {}
    origin = rec.get("origin")
    if origin == "local" or rec.get("cluster") == "local":
        platform = "this machine (mlenv acceptance --local)"
    elif origin == "cluster":
        platform = str((deployment or {}).get("platform") or f"cluster {rec.get('cluster')}")
    else:
        platform = "unknown (no record.json of this run)"
    listed = world.get("hosts")
    hosts: list[Any] = listed if isinstance(listed, list) else []
    return {
        "platform": platform,
        "cluster": rec.get("cluster"),
        "device": world.get("device"),
        "backend": world.get("backend"),
        "ranks": world.get("ranks"),
        "nodes": world.get("nodes"),
        "hosts": sorted({str(h) for h in hosts}),
    }


def ran_line(ran: dict[str, Any]) -> str:
    """``ran on this machine (mlenv acceptance --local): 2 rank(s), cpu/gloo, 1 node(s)``."""
    return (
        f"ran on {ran.get('platform')}: {ran.get('ranks')} rank(s), {ran.get('device')}/{ran.get('backend')}, "
        f"{ran.get('nodes')} node(s)"
    )
