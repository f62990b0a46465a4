"""``mlenv discover NAME --namespace NS``: write a starting ``clusters/NAME.yaml``;
``mlenv wizard``: the same, with a few questions on the way (upstream's ``make wizard``)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from mlenv.cli._clusterctx import session
from mlenv.cli._common import SETTINGS, guarded, repo_root
from mlenv.cli._output import check_format, emit
from mlenv.contract import APP
from mlenv.errors import InputError

if TYPE_CHECKING:
    from mlenv.cluster.discover import Discovered

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def _check_names(*pairs: tuple[str, str]) -> None:
    for what, v in pairs:
        if not DNS_LABEL.match(v):
            raise InputError(
                f"{what} {v!r}: must be a DNS-1123 label (lowercase letters, digits, '-')"
            )


@guarded
def discover(
    name: Annotated[str, typer.Argument(help="Cluster name: the file is clusters/NAME.yaml.")],
    namespace: Annotated[
        str | None,
        typer.Option(
            "--namespace",
            "-n",
            help="Namespace to deploy into (default: the kubeconfig context's, else ml-dev-env).",
        ),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the config, write nothing.")
    ] = False,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")] = False,
    output: Annotated[
        str | None,
        typer.Option(
            "--output", "-o", help="With --dry-run: yaml (default, the file as written) or json."
        ),
    ] = None,
) -> None:
    """Read GPU nodes, RDMA resources, networks and storage classes; write a starting config."""
    from mlenv.cluster.kubeconfig import current_namespace
    from mlenv.platforms.dispatch import platform_named

    # `mlenv -n NS discover NAME` (the global option before the verb) means the same; the
    # default is the namespace you work in (the current context's: upstream read `oc
    # project -q`), else one named after the app
    namespace = (
        namespace
        or SETTINGS.namespace
        or current_namespace(SETTINGS.kubeconfig, SETTINGS.context)
        or APP
    )
    _check_names(("NAME", name), ("--namespace", namespace))
    fmt = check_format(output, ("json", "yaml"))
    if fmt is not None and not dry_run:
        raise InputError("-o/--output prints the config: it goes with --dry-run")
    path = Path(repo_root()) / "clusters" / f"{name}.yaml"
    if path.exists() and not force and not dry_run:
        raise InputError(f"{path} exists: pass --force to overwrite it, or --dry-run to print")
    text = platform_named("openshift").discover(name, session(), namespace=namespace)
    _check_discovered(name, text)
    if dry_run:
        if fmt == "json":
            import yaml

            emit(yaml.safe_load(text), "json")
        else:
            typer.echo(text, nl=False)
        return
    _write(path, name, text)


def _from_wizard_file(src: Path, name: str | None, force: bool) -> None:
    """clusters/NAME.yaml from upstream's saved wizard answers and the config they name."""
    import yaml

    from mlenv.config import loader
    from mlenv.config.wizardfile import WizardFileError, convert, is_wizard_file
    from mlenv.config.yamlpos import parse

    def read(path: Path) -> object:
        parsed = parse(loader.read_capped(path), str(path))
        if parsed.data is None:
            raise InputError("\n".join(d.format() for d in parsed.diagnostics))
        return parsed.data

    try:
        wizard = read(src)
    except OSError as e:
        raise InputError(f"--from {src}: cannot read it ({e.strerror or e})") from None
    if not is_wizard_file(wizard):
        raise InputError(
            f"--from {src}: not a file saved by upstream's deployment wizard (it has a "
            "`deployment:` block naming a cluster); a cluster config deploys as it is"
        )
    assert isinstance(wizard, dict)
    name = name or src.stem
    _check_names(("cluster name (NAME)", name))
    cluster = wizard["deployment"]["cluster"]
    if not loader.is_bare_name(cluster):  # a name under clusters/, never a path to read
        raise InputError(f"{src}: deployment.cluster: {cluster!r} is not a cluster name")
    base_path = loader.resolve(cluster, repo_root())  # the cluster the answers were for
    base = read(base_path)
    if not isinstance(base, dict):
        raise InputError(f"{base_path}: not a cluster config (a mapping)")
    try:
        made = convert(wizard, base, name)
    except WizardFileError as e:
        raise InputError(f"{src}: {e}") from None
    text = (
        f"# Converted by `mlenv wizard --from {src.name}` from upstream's saved wizard answers\n"
        f"# and clusters/{base_path.name}; review it, then `mlenv validate {name}`.\n"
        + yaml.safe_dump(made.data, sort_keys=False, default_flow_style=False)
    )
    _check_discovered(name, text, what="the converted config")
    path = Path(repo_root()) / "clusters" / f"{name}.yaml"
    if path.resolve() == base_path.resolve() or path.resolve() == src.resolve():
        raise InputError(
            f"NAME {name!r} would overwrite {path}, which it was made from: pick another"
        )
    if path.exists() and not force:
        raise InputError(f"{path} exists and was kept: pass --force, or give another NAME")
    _write(path, name, text)
    for line in made.left_out:
        typer.echo(f"note: {line}")
    typer.echo(f"next: make deploy-cluster CLUSTER={name}")


def _check_discovered(name: str, text: str, what: str = "the discovered config") -> None:
    """InputError unless ``text`` validates: clusters/ never holds a file `mlenv validate`
    rejects, and --dry-run never prints one."""
    import tempfile

    from mlenv.config import check_file

    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir) / f"{name}.yaml"
        tmp.write_text(text)
        cfg, diags = check_file(tmp)
    if cfg is None:
        raise InputError(f"{what} does not validate:\n" + "\n".join(d.format() for d in diags))


def _write(path: Path, name: str, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    typer.echo(f"wrote {path}: review it, then `mlenv validate {name}`")


def _questions(found: Discovered) -> None:
    """The wizard's questions about what was found (an empty answer takes the default)."""
    typer.echo(
        f"found on {found.api}: {len(found.gpu_nodes)} GPU node(s)"
        + (
            f" with {found.gpus_per_node} {found.gpu_product or 'GPU'}(s) each"
            if found.gpu_nodes
            else ""
        )
        + "; RDMA "
        + (", ".join(sorted(found.rdma_resources)) if found.rdma_found else "none")
        + f"; shared (RWX) storage {found.rwx_class or 'none'}"
    )
    most = max(len(found.gpu_nodes), 1)
    nodes = typer.prompt(f"Pods to deploy (1-{most})", default=found.nodes_default, type=int)
    if not 1 <= nodes <= most:
        raise InputError(f"pods: {nodes} is not between 1 and {most} (the GPU nodes found)")
    found.default_nodes = nodes
    if found.rdma_found:
        found.use_rdma = typer.confirm("Use RDMA between the pods", default=True)
    for tool, what in (
        ("vscode", "VS Code in the browser (code-server)"),
        ("jupyter", "JupyterLab"),
    ):
        if typer.confirm(what, default=False):
            found.dev_tools.append(tool)


@guarded
def wizard(
    name: Annotated[
        str | None,
        typer.Argument(help="Cluster name (asked when not given): the file is clusters/NAME.yaml."),
    ] = None,
    namespace: Annotated[
        str | None,
        typer.Option("--namespace", "-n", help="Namespace to deploy into (asked when not given)."),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Overwrite an existing file without asking.")
    ] = False,
    from_file: Annotated[
        Path | None,
        typer.Option(
            "--from",
            help="Convert a file saved by upstream ml-dev-env's deployment wizard instead "
            "(no discovery, no questions); NAME defaults to the file's name.",
        ),
    ] = None,
) -> None:
    """Discover the cluster you are logged in to, ask what to use of it (pods, RDMA, dev
    tools), and write a starting clusters/NAME.yaml that validates. Answers come from the
    terminal or standard input, one a line (an empty line takes the default)."""
    from mlenv.platforms.dispatch import platform_named

    if from_file is not None:
        _from_wizard_file(from_file, name, force)
        return
    try:
        if name is None:
            name = str(typer.prompt("Cluster name (the file is clusters/NAME.yaml)"))
        _check_names(("cluster name", name))  # a bad answer stops before the next question
        namespace = (
            namespace
            or SETTINGS.namespace
            or str(typer.prompt("Namespace to deploy into", default=APP))
        )
        _check_names(("namespace", namespace))
        path = Path(repo_root()) / "clusters" / f"{name}.yaml"
        answers: dict[str, bool] = {}

        def ask(found: Discovered) -> None:
            _questions(found)
            answers["rdma"] = bool(found.rdma_found if found.use_rdma is None else found.use_rdma)

        text = platform_named("openshift").discover(name, session(), namespace=namespace, ask=ask)
        _check_discovered(name, text)
        if (
            path.exists()
            and not force
            and not typer.confirm(f"{path} exists: overwrite it", default=False)
        ):
            raise InputError(f"{path} exists and was kept: pass --force, or pick another name")
    except typer.Abort:  # end of input before every question had an answer
        raise InputError(
            "wizard: no answer (end of input); run it on a terminal, or give one "
            "answer a line on standard input"
        ) from None
    _write(path, name, text)
    typer.echo(
        f"next: make deploy-cluster CLUSTER={name} (mode {'rdma' if answers.get('rdma') else 'tcp'})"
    )


def register(app: typer.Typer) -> None:
    """Add ``discover`` and ``wizard`` to the app."""
    app.command("discover")(discover)
    app.command("wizard")(wizard)
