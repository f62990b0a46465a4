"""Write mlenv/render/schemas/kubernetes-<version>-local-strict.json.gz from the installed
kubernetes-validate package (a dev dependency; Apache-2.0, as the Kubernetes OpenAPI it is
derived from).

mlenv validates rendered manifests against one Kubernetes version's strict schemas. The
package ships every version from 1.25 on (108 MB installed) and mlenv reads one folder of
it (4.6 MB, 390 KB compressed): carrying that folder keeps the cluster verbs' install small
(README, "Install"). tests/unit/render/test_render_validate.py checks the file is the
package's folder, byte for byte after parsing, whenever the package is installed.

    .venv/bin/python scripts/dev/vendor-k8s-schemas.py
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from mlenv.render.validate import K8S_VERSION, vendored_schemas_path  # noqa: E402


def folder_contents() -> dict[str, object]:
    """Every JSON file of kubernetes-validate's strict folder for K8S_VERSION, parsed."""
    from importlib import resources

    folder = resources.files("kubernetes_validate").joinpath(
        "kubernetes-json-schema", f"v{K8S_VERSION}-local-strict"
    )
    return {
        entry.name: json.loads(entry.read_text())
        for entry in sorted(folder.iterdir(), key=lambda e: e.name)
        if entry.name.endswith(".json")
    }


def main() -> None:
    data = json.dumps(folder_contents(), sort_keys=True, separators=(",", ":")).encode()
    out = vendored_schemas_path()
    # mtime=0: the same schemas give the same bytes, so a re-run changes nothing in git
    out.write_bytes(gzip.compress(data, 9, mtime=0))
    print(f"wrote {out.relative_to(ROOT)} ({out.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
