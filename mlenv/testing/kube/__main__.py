"""``python -m mlenv.testing.kube up|down|status|grant NS [ROLE]|build|env`` (make kube-up/kube-down).

Exit codes: 0 done, 2 bad usage, 3 the plane could not be built or started.
"""

from __future__ import annotations

import json
import os
import shlex
import sys

from mlenv.testing.kube import build, pki, plane, podroots, scc

USAGE = "usage: python -m mlenv.testing.kube up|down|restart|status|build|env|grant NAMESPACE [admin|edit]"


def _say(line: str) -> None:
    print(line, flush=True)


def main(argv: list[str]) -> int:
    if not argv:
        print(USAGE, file=sys.stderr)
        return 2
    verb, rest = argv[0], argv[1:]
    try:
        if verb == "up":
            raw = os.environ.get("KUBE_SCALE_NODES", "").strip() or "0"
            if not raw.isdigit():
                print(
                    f"kube tier: KUBE_SCALE_NODES={raw!r}: expected a count of nodes (0 or more)",
                    file=sys.stderr,
                )
                return 2
            flavor = os.environ.get("KUBE_FLAVOR", "openshift").strip() or "openshift"
            tier = plane.up(flavor, _say, scale_nodes=int(raw))
            print(f"export KUBECONFIG={shlex.quote(str(tier.admin_kubeconfig))}")
            print(
                f"# non-admin: export KUBECONFIG={shlex.quote(str(tier.user_kubeconfig))} "
                "(python -m mlenv.testing.kube grant NAMESPACE gives it a namespace)"
            )
            return 0
        if verb == "down":
            plane.down(_say)
            return 0
        if verb == "restart":
            plane.restart(_say)
            return 0
        if verb == "status":
            print(json.dumps(plane.status(), indent=1))
            return 0
        if verb == "build":
            b = build.build(_say)
            print(
                f"kubernetes {build.K8S_VERSION}: {b.kube_bin}\netcd {build.ETCD_VERSION}: {b.etcd}\n"
                f"kwok {build.KWOK_VERSION}: {b.kwok}"
            )
            return 0
        if verb == "env":
            print(
                f"export KUBECONFIG={shlex.quote(str(plane.Tier(plane.tier_dir()).admin_kubeconfig))}"
            )
            print(f'export PATH={shlex.quote(str(build.paths().kube_bin))}:"$PATH"')
            return 0
        if (
            verb == "grant"
            and 1 <= len(rest) <= 2
            and (rest[1:] or ["admin"])[0] in ("admin", "edit")
        ):
            role = (rest[1:] or ["admin"])[0]
            plane.grant(rest[0], role)
            print(f"{pki.USER_NAME} may now act in namespace {rest[0]} ({role})")
            return 0
        if verb == "podroots" and len(rest) == 3:
            return podroots.main(rest)
        if verb == "scc" and len(rest) == 2:
            return scc.main(rest)
    except (plane.PlaneError, build.BuildError) as e:
        print(f"kube tier: {e}", file=sys.stderr)
        return 3
    print(USAGE, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
