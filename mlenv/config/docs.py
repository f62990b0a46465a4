"""Generate ``docs/config-reference.md`` from the JSON Schema: ``python -m mlenv.config.docs``.

The schema is the single source of key names, types, defaults and descriptions; a
unit test fails when the committed page differs from this output.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from mlenv.config.schema import schema

HEADER = """\
# Cluster config reference

<!-- Generated from mlenv/config/cluster.schema.json by `python -m mlenv.config.docs`;
     do not edit by hand. -->

One YAML file per cluster under `clusters/`, validated by `mlenv validate` against
[`clusters/cluster.schema.json`](../clusters/cluster.schema.json) (JSON Schema draft
2020-12; unknown keys are errors) plus the semantic rules listed at the end. Start
each file with `# yaml-language-server: $schema=./cluster.schema.json` for editor
completion. Lists of names (`devices`, `interfaces`, `interface_exclude`) may be
written as a YAML list or a comma-separated string (`mlx5_6,mlx5_7`).
"""

RULES = """\
## Rules beyond the schema

- `cluster.name` and `cluster.namespace` are DNS-1123 labels (at most 63 characters);
  `cluster.namespace` is required on `openshift`/`kubernetes` only (a per-platform rule in
  the schema). `security.service_account` is a DNS-1123 subdomain, and so is every
  `nodes.gpu_nodes` entry on `openshift`/`kubernetes`; on `hosts` an entry is a host name
  (letters, digits, `-`, `_`, `.`: `Lambda-H100-2`, `GPU_Node7`), on `slurm` a host name or a
  hostlist (`hgx[01-04]`, at most 4096 hosts, no host twice).
- A file in `clusters/` is named after its `cluster.name` (`clusters/NAME.yaml`): a copy
  saved as `clusters/mine.yaml` that still says `name: barcelona` would render into
  `k8s/barcelona/`, over that config's tree, so it is refused. A file outside `clusters/`
  may carry any name, but `mlenv render` will not write it into `k8s/NAME/` when
  `clusters/NAME.yaml` is another file (`--out DIR` renders it elsewhere).
  `network.rdma.networks` entries are `name` or `namespace/name`.
- Sizes (`storage.*_size`, `shm_size`) and `resources` are Kubernetes quantities
  (`100Gi`, `512Mi`, `8`, `500m`; no surrounding spaces, at most 2^63-1 base units);
  sizes are above zero; a request is not above its limit.
- Every name and pattern must match the whole value: a trailing newline (`"demo\\n"`,
  `gid_index: "3\\n"`) is an error. Quoted numbers (`gid_index: "3"`) are ASCII digits.
- With `network.rdma.enabled: true`: `devices` is listed or `auto`, and on
  `openshift`/`kubernetes`, unless `auto`, there are as many `interfaces` as `devices`
  (on `slurm`/`hosts` `interfaces` is optional and unpaired); no device or interface twice;
  interface names have at most 15 characters; `device:port` (`mlx5_0:1`) on `slurm`/`hosts`
  only. On `openshift`/`kubernetes`, neither `resources` nor `networks` set is a warning
  (not an error): the pods would get no RDMA device and no Multus network.
- `gpus.default_nodes` is at most the number of `nodes.gpu_nodes` when those are listed.
- `nodes.topology`: each rack name is a DNS-1123 label; its nodes are named as `nodes.gpu_nodes`
  names them on the platform (hostlists expanded on `slurm`); no node is in two racks.
- `nodes.topology_label` and `nodes.topology` are not both set (one source of racks);
  `topology_label` off Kubernetes is a warning (ignored).
- `nodes.pin_by: label` needs `nodes.gpu_nodes` listed (it labels those nodes); off Kubernetes
  it is a warning (ignored). 128 or more `gpu_nodes` pinned by name on Kubernetes is a
  warning: each pod names them all, and pod lists grow with their square.
- `acceptance.schedule`: each cron field within its range (minute 0-59, hour 0-23, day of month
  1-31, month 1-12, day of week 0-7), ranges not backwards, steps at least 1;
  `acceptance.priority_class` a DNS-1123 subdomain, `acceptance.runner_image` an image reference
  (both warnings on `slurm`/`hosts`, which ignore them).
  `acceptance.metrics.push` is `http(s)://HOST[:PORT][/PATH]`: no credentials (`user:password@`),
  no query, no `%`, no spaces (it reaches a pod's argv, a batch script and a cron line).
- `nccl.env` may not set variables that other keys control (NCCL_IB_HCA, NCCL_DEBUG, …),
  except `NCCL_SOCKET_IFNAME` on `slurm`/`hosts` (interface names, optionally after `^` or `=`).
- `ssh_port` and `master_port` differ.
- Deploying with MODE=rdma on a cluster with `network.rdma.enabled: false` falls back to
  TCP with a warning.
- `platform: slurm` needs `slurm.shared_dir`; `slurm.partition` may be empty (no
  `--partition`: Slurm's default, or the site's choice by QOS, account or constraint).
  `qos` and `gpu_type` are plain words (letters, digits, `_`, `.`, `-`, not starting with
  `-`); `account` too, and it may hold `@` (`xyz@a100`);
  `partition` and `reservation` a plain word or a comma list of them; `constraint` is parsed
  as a Slurm constraint expression (features joined by `&`, `|`, `,`, counts `*N`, groups
  `[...]`/`(...)`, nothing else); `time_limit` parses as a Slurm time and is not zero;
  `shared_dir` (and `hosts.shared_dir`) is an absolute path without `..`, spaces or shell
  metacharacters; `python` is a command name or an absolute path.
- `slurm.container` (or the flat `container_image`/`container_mounts`, not both): with
  `runtime: pyxis` the image is an image reference, `REGISTRY#IMAGE[:TAG]` or an absolute
  `.sqsh`/`.sqfs`/`.squashfs` path, and mounts are `SRC[:DST[:FLAGS]]` absolute paths, FLAGS
  enroot mount flags (`ro`, `rw`, `bind`, `rbind`, `private`, `rprivate`, `slave`, `rslave`,
  `shared`, `rshared`, `nosuid`, `nodev`, `noexec`, `x-create=dir|file|auto`) joined by `+` or
  `,` (rendered with `+`); `env` entries are variable names and `name` a plain word. With
  `runtime: apptainer` the image is an absolute `.sif` path or `docker://IMAGE[:TAG]`, mounts
  take `ro` or `rw` only, and `env`/`name` (pyxis options) are refused. No mount's
  destination is `shared_dir` or a folder above it (it would hide it in the container).
- `slurm.env` names are `FI_*` or `GLOO_SOCKET_IFNAME` only (NCCL_* go in `nccl.env`);
  `GLOO_SOCKET_IFNAME` is a comma list of interface names, an `FI_*` value a plain word
  (letters, digits, `_ . , / + = -`, not starting with `-`; so not a layered provider's
  `tcp;ofi_rxm`).
- `slurm.master_addr_suffix` is letters, digits, `.`, `-`; `slurm.modules` entries are
  module names (`Stages/2024`, `PyTorch/2.1.2-foss-2023a`: parts of letters, digits,
  `_ . + -` joined by `/`, not starting with `-`, `.` or `/`).
- On `slurm`/`hosts`, `network.rdma.devices` may start with NCCL_IB_HCA's prefixes, once,
  before the whole list: `=` (exact names: `=mlx5_1` does not also select `mlx5_10`), `^`
  (exclude: `^mlx5_bond_0`) or `^=`.
- `slurm.sbatch_args` entries are `--option[=value]` of this allow-list, each once, the value
  plain (no quotes, `#`, `$`, `;`, `` ` ``, `\\`, `<`, `>`, `!` or control characters; spaces
  only inside): ALLOWED. Options that
  other keys set (`--partition`, `--time`, `--nodelist`, `--gpus-per-node`, …) are refused
  with the key to use; so is everything else (`--export`, `--chdir`, `--output`, `--wrap`,
  `--clusters`, `--hold`, …). `--gres` only with `gpus_flag: none`.
- `platform: hosts` needs `nodes.gpu_nodes` (host 0 is the head); `hosts.ssh_user` is a user
  name, `hosts.ssh_key` an absolute or `~/` path.
- Keys for another platform are warnings, not errors: a `slurm:` or `hosts:` section under a
  different platform, and on `slurm`/`hosts` the pod-only keys (`storage`, `security`,
  `dev_tools`, `scheduling`, `resources`, `shm_size`, `ssh_port`, `image.ref`).
"""


def _rules() -> str:
    from mlenv.argv import SBATCH_OPTIONS

    allowed = ", ".join(
        f"`--{o}`" if k == "flag" else f"`--{o}=…`" for o, k in sorted(SBATCH_OPTIONS.items())
    )
    return RULES.replace("ALLOWED", allowed)


def _type(node: dict[str, Any]) -> str:
    t = node.get("type", "")
    names = [t] if isinstance(t, str) else list(t)
    words = {"object": "mapping", "array": "list", "null": "null"}
    out = " \\| ".join(words.get(n, n) for n in names)
    if "enum" in node:
        out += ": " + " \\| ".join(f"`{v}`" for v in node["enum"])
    return out + _bounds(node)


def _bounds(node: dict[str, Any]) -> str:
    """The schema's ranges and lengths, so the reference says what validate enforces."""
    parts = []
    lo, hi = node.get("minimum"), node.get("maximum")
    if "exclusiveMinimum" in node:
        parts.append(f"> {node['exclusiveMinimum']}" + (f", ≤ {hi}" if hi is not None else ""))
    elif lo is not None or hi is not None:
        parts.append(f"{'' if lo is None else lo}…{'' if hi is None else hi}")
    if "minLength" in node or "maxLength" in node:
        parts.append(f"length {node.get('minLength', 0)}…{node.get('maxLength', '')}")
    if "minItems" in node or "maxItems" in node:
        parts.append(f"{node.get('minItems', 0)}…{node.get('maxItems', '')} items")
    return f" ({'; '.join(parts)})" if parts else ""


def _default(node: dict[str, Any]) -> str:
    if "default" not in node:
        on = node.get("x-required-on")
        return f"required on {', '.join(on)}" if on else "required"
    d = node["default"]
    if isinstance(d, dict) and node.get("properties"):
        return "—"  # a section: its keys carry the defaults
    return f"`{json.dumps(d)}`"


def _rows(node: dict[str, Any], prefix: str, out: list[str]) -> None:
    for key, sub in node.get("properties", {}).items():
        path = f"{prefix}.{key}" if prefix else key
        desc = str(sub.get("description", "")).replace("|", "\\|").replace("\n", " ")
        out.append(f"| `{path}` | {_type(sub)} | {_default(sub)} | {desc} |")
        if sub.get("properties"):
            _rows(sub, path, out)


def render() -> str:
    """The Markdown reference page for the current schema."""
    s = schema()
    lines = [HEADER, f"{s.get('description', '')}\n", "## Keys\n"]
    lines.append("| key | type | default | description |")
    lines.append("|---|---|---|---|")
    rows: list[str] = []
    _rows(s, "", rows)
    lines.extend(rows)
    lines.append("")
    lines.append(_rules())
    return "\n".join(lines)


def main() -> None:
    """Print the page on stdout."""
    sys.stdout.write(render())


if __name__ == "__main__":
    main()
