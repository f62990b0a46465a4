"""One or two example command lines per verb, shown at the end of its ``--help``.

Kept here, not in each verb's docstring, so that ``tests/cli/test_verbs.py`` can run every
one through the parser (an example with a flag a verb lost would fail there) and the
verbs' modules stay as their owners write them.
"""

from __future__ import annotations

EXAMPLES: dict[str, tuple[str, ...]] = {
    "validate": ("mlenv validate", "mlenv validate barcelona -o json"),
    "render": ("mlenv render barcelona --mode rdma", "mlenv render --all --check"),
    "list-clusters": ("mlenv list-clusters", "mlenv list-clusters -o yaml"),
    "acceptance": (
        "mlenv acceptance --local --profile quick",
        "mlenv acceptance --local --checks compute,collectives --bundle",
    ),
    "deploy": ("mlenv deploy barcelona", "mlenv deploy barcelona --mode tcp --dry-run client"),
    "status": ("mlenv status barcelona", "mlenv status barcelona -o json"),
    "sync": ("mlenv sync barcelona", "mlenv sync barcelona --watch --dir src"),
    "stage": ("mlenv stage site-university",),
    "shell": ("mlenv shell barcelona", "mlenv shell barcelona --pod 1 -- nvidia-smi"),
    "logs": ("mlenv logs barcelona --pod 1 --tail 50", "mlenv logs barcelona -f"),
    "port-forward": ("mlenv port-forward barcelona", "mlenv port-forward barcelona --debug"),
    "launch": ("mlenv launch barcelona", "mlenv launch barcelona --torchrun train_multi_node.py"),
    "teardown": ("mlenv teardown barcelona --dry-run", "mlenv teardown barcelona --legacy"),
    "build": ("mlenv build barcelona",),
    "url": ("mlenv url barcelona vscode",),
    "gpu-info": ("mlenv gpu-info barcelona",),
    "discover": ("mlenv discover mycluster -n team-a --dry-run",),
    "wizard": ("mlenv wizard mycluster -n team-a",),
    "secrets": ("mlenv secrets barcelona -o json",),
    "bundle": ("mlenv bundle acceptance-report/latest", "mlenv bundle verify bundle.tar.gz"),
    "finalize": ("mlenv finalize acceptance-report/RUN_ID",),
    "history": ("mlenv history local", "mlenv history barcelona --fetch -o json"),
    "compare": ("mlenv compare RUN_A RUN_B", "mlenv compare RUN_A RUN_B --tolerance 0.05"),
    "metrics": (
        "mlenv metrics RUN_ID --textfile /var/lib/node_exporter/textfile",
        "mlenv metrics latest --cluster barcelona --push http://pushgateway:9091",
    ),
    "quarantine": (
        "mlenv quarantine RUN_ID",
        "mlenv quarantine RUN_ID --apply",
        "mlenv quarantine RUN_ID --apply --confirm 1/1 --condition",
    ),
    "release": ("mlenv release RUN_ID --after RUN_ID2", "mlenv release RUN_ID --force --dry-run"),
    "recheck": (
        "mlenv recheck RUN_ID",
        "mlenv recheck RUN_ID --node gpu-node-03 -- --checks compute",
    ),
    "help": ("mlenv help deploy",),
    "completion": ("source <(mlenv completion bash)",),
}


def help_with_examples(help_text: str, verb: str) -> str:
    """``help_text`` followed by the verb's examples (``\\b``: Click keeps their lines)."""
    lines = EXAMPLES.get(verb, ())
    if not lines:
        return help_text
    block = "\n".join(f"  {line}" for line in lines)
    return f"{help_text.rstrip()}\n\n\b\nExamples:\n{block}\n"
