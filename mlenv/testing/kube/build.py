"""Build the kube tier's binaries from Go modules, pinned and cached outside the checkout.

What is built, each into ``<cache>/<component>-<version>/bin`` where
``<cache>`` is ``$MLENV_KUBE_CACHE`` or ``~/.cache/mlenv/kube``:

- ``kube-apiserver``, ``kube-controller-manager``, ``kube-scheduler``, ``kubectl`` from
  ``k8s.io/kubernetes`` through the wrapper module in ``scripts/kube/go/kubernetes``
  (k8s.io/kubernetes lists its staging modules at ``v0.0.0`` and points them at
  ``./staging`` with replace lines that Go ignores outside its own module, so our go.mod
  replaces each with its published ``v0.Y.Z``), stamped with the real version on both
  ``k8s.io/component-base/version`` and ``k8s.io/client-go/pkg/version`` (unstamped, the
  server would say ``v0.0.0-master``);
- ``etcd`` from ``go.etcd.io/etcd/server/v3`` (``scripts/kube/go/etcd``): Debian's 3.4 is
  too old for the 1.34 apiserver's watch-list streams (RequestWatchProgress needs ≥3.5.13);
- ``kwok`` from a copy of its module source with one fix of ours (:func:`patch_kwok`: an
  exec's stdin pipe is closed at the end of the stream, so ``kubectl cp`` and ``tar -x``
  through exec finish), built with ``go build ./cmd/kwok`` in that copy.

A binary already in the cache is never rebuilt; the Go module and build caches
(``go env GOMODCACHE GOCACHE``) make a rebuild after a version bump fast.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

K8S_VERSION = "v1.34.4"
ETCD_VERSION = "v3.6.10"
KWOK_VERSION = "v0.8.0"
KUBE_BINARIES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
REPO = Path(__file__).resolve().parents[3]
GO_MODULES = REPO / "scripts" / "kube" / "go"


class BuildError(RuntimeError):
    """A Go build or download failed; the message names the command and its output tail."""


def cache_root() -> Path:
    env = os.environ.get("MLENV_KUBE_CACHE", "").strip()
    return Path(env) if env else Path.home() / ".cache" / "mlenv" / "kube"


@dataclass(frozen=True)
class Binaries:
    """Where each built program lives."""

    kube_bin: Path
    etcd: Path
    kwok: Path
    kwok_source: Path  # the kwok module's source (its CRD manifests)

    def kube(self, name: str) -> Path:
        return self.kube_bin / name


def paths() -> Binaries:
    root = cache_root()
    return Binaries(
        kube_bin=root / f"kubernetes-{K8S_VERSION}" / "bin",
        etcd=root / f"etcd-{ETCD_VERSION}" / "bin" / "etcd",
        kwok=root / f"kwok-{KWOK_VERSION}" / "bin" / "kwok",
        kwok_source=_module_dir_guess("sigs.k8s.io/kwok", KWOK_VERSION),
    )


def _module_dir_guess(module: str, version: str) -> Path:
    modcache = os.environ.get("GOMODCACHE") or str(
        Path(os.environ.get("GOPATH") or Path.home() / "go") / "pkg" / "mod"
    )
    return Path(modcache) / f"{module}@{version}"


def version_ldflags(version: str) -> str:
    """``-X`` flags stamping ``version`` as kube's hack/lib/version.sh does, on both packages
    that report it (the server's /version and kubectl's client version)."""
    major, minor = version.lstrip("v").split(".")[:2]
    values = {
        "gitVersion": version,
        "gitMajor": major,
        "gitMinor": minor,
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "1970-01-01T00:00:00Z",
    }
    flags = []
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [f"-X '{pkg}.{key}={value}'" for key, value in values.items()]
    return " ".join(flags)


def _go(args: list[str], cwd: Path, log: Path, env: dict[str, str] | None = None) -> None:
    go = shutil.which("go")
    if go is None:
        raise BuildError("go is not on PATH: the kube tier builds its binaries with Go ≥1.26")
    with log.open("ab") as out:
        out.write(f"\n$ go {' '.join(args)}   (in {cwd})\n".encode())
        out.flush()
        rc = subprocess.run(
            [go, *args],
            cwd=cwd,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            check=False,
        ).returncode
    if rc != 0:
        tail = log.read_text(errors="replace").splitlines()[-15:]
        raise BuildError(
            f"go {' '.join(args[:2])} failed (exit {rc}); see {log}:\n" + "\n".join(tail)
        )


def _stage_module(name: str, dest: Path) -> None:
    """Copy our wrapper module out of the checkout: go may touch go.sum, never the checkout's."""
    dest.mkdir(parents=True, exist_ok=True)
    for f in ("go.mod", "go.sum", "tools.go"):
        shutil.copyfile(GO_MODULES / name / f, dest / f)


def build(say: Callable[[str], None] | None = None) -> Binaries:
    """Build whatever is missing; returns where everything is. Serialised by a lock file."""
    out = paths()
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    log = root / "build.log"
    timings = root / "build-times.json"
    with (root / "build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        times: dict[str, float] = json.loads(timings.read_text()) if timings.exists() else {}
        missing = [b for b in KUBE_BINARIES if not out.kube(b).exists()]
        if missing:
            _tell(
                say,
                f"building {', '.join(missing)} {K8S_VERSION} (cold: tens of minutes on 2 cores; log {log})",
            )
            started = time.monotonic()
            src = out.kube_bin.parent / "src"
            _stage_module("kubernetes", src)
            tmp = out.kube_bin.parent / "bin.tmp"
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
            _go(
                [
                    "build",
                    "-ldflags",
                    version_ldflags(K8S_VERSION),
                    "-o",
                    str(tmp) + "/",
                    *(f"k8s.io/kubernetes/cmd/{b}" for b in missing),
                ],
                src,
                log,
            )
            out.kube_bin.mkdir(parents=True, exist_ok=True)
            for b in missing:
                os.replace(tmp / b, out.kube(b))
            shutil.rmtree(tmp, ignore_errors=True)
            times[f"kubernetes-{K8S_VERSION}"] = round(time.monotonic() - started, 1)
        if not out.etcd.exists():
            _tell(say, f"building etcd {ETCD_VERSION} (log {log})")
            started = time.monotonic()
            src = out.etcd.parent.parent / "src"
            _stage_module("etcd", src)
            out.etcd.parent.mkdir(parents=True, exist_ok=True)
            _go(["build", "-o", str(out.etcd) + ".tmp", "go.etcd.io/etcd/server/v3"], src, log)
            os.replace(str(out.etcd) + ".tmp", out.etcd)
            times[f"etcd-{ETCD_VERSION}"] = round(time.monotonic() - started, 1)
        if not (out.kwok_source / "kustomize" / "crd" / "bases").is_dir():
            _go(["mod", "download", f"sigs.k8s.io/kwok@{KWOK_VERSION}"], root, log)
        marker = out.kwok.with_name(KWOK_PATCHED)
        if not out.kwok.exists() or not marker.exists() or marker.read_text() != KWOK_PATCHES:
            _tell(
                say,
                f"building kwok {KWOK_VERSION} with our patches: {KWOK_PATCHES.strip()} (log {log})",
            )
            started = time.monotonic()
            src = out.kwok.parent.parent / "src"
            shutil.rmtree(src, ignore_errors=True)
            shutil.copytree(out.kwok_source, src)
            for d, _dirs, files in os.walk(src):  # the module cache is read-only
                os.chmod(d, 0o755)
                for f in files:
                    os.chmod(os.path.join(d, f), 0o644)
            patch_kwok(src)
            out.kwok.parent.mkdir(parents=True, exist_ok=True)
            _go(["build", "-o", str(out.kwok) + ".tmp", "./cmd/kwok"], src, log)
            os.replace(str(out.kwok) + ".tmp", out.kwok)
            marker.write_text(KWOK_PATCHES)
            times[f"kwok-{KWOK_VERSION}"] = round(time.monotonic() - started, 1)
        timings.write_text(json.dumps(times, indent=1) + "\n")
    return out


# kwok 0.8.0 copies an exec's stdin into the process's pipe and never closes the pipe
# (pkg/utils/exec/exec.go), so a process reading stdin to its end never sees EOF:
# `kubectl cp` into a pod, and every `tar -x` that `mlenv sync` runs through exec, hang.
# Our build closes the pipe when the stream ends, as a container runtime does.
KWOK_PATCHED = "kwok.patched"
_KWOK_STDIN = (
    "\t\t\t\t_, _ = io.Copy(inPipe, opt.In)\n",
    "\t\t\t\t_, _ = io.Copy(inPipe, opt.In)\n\t\t\t\t_ = inPipe.Close() // mlenv: EOF reaches the process\n",
)


# kwok 0.8.0 also returns an exec'd process's failure as a plain error, which the streaming
# server sends as an internal error: kubectl exits 1 whatever the process's status ("cmd
# wait: …: exit status 2"). A kubelet sends NonZeroExitCode with the code and kubectl exits
# with it; `mlenv launch` maps 1 to an acceptance FAIL and 3 to an error, so the tier must
# pass the status through. The patch wraps it as k8s.io/utils/exec.CodeExitError, the type
# the streaming server reads the code from.
_KWOK_EXIT = (
    "\terr := utilsexec.Exec(ctx, cmd[0], cmd[1:]...)\n\tif err != nil {\n\t\treturn err\n\t}\n\treturn nil\n}\n",
    "\treturn mlenvExitCode(utilsexec.Exec(ctx, cmd[0], cmd[1:]...)) // mlenv: the exit status\n}\n",
)
_KWOK_EXIT_GO = """// Added by mlenv's kube tier build (mlenv/testing/kube/build.py), not part of kwok.

package server

import (
	"errors"
	osexec "os/exec"

	k8sexec "k8s.io/utils/exec"
)

// mlenvExitCode passes an exec'd process's exit status to the client, as a kubelet does.
func mlenvExitCode(err error) error {
	var exitErr *osexec.ExitError
	if errors.As(err, &exitErr) && exitErr.Exited() {
		return k8sexec.CodeExitError{Err: err, Code: exitErr.ExitCode()}
	}
	return err
}
"""
# What the cached kwok carries; a different value rebuilds it (36 s with a warm Go cache).
KWOK_PATCHES = "stdin-eof exit-code\n"


def _patch(f: Path, old: str, new: str, what: str) -> None:
    text = f.read_text()
    if text.count(old) != 1:
        raise BuildError(
            f"kwok {KWOK_VERSION}: {f} no longer has the code our {what} patch fixes; "
            "check whether upstream fixed it and drop the patch"
        )
    f.write_text(text.replace(old, new))


def patch_kwok(src: Path) -> None:
    """Apply our fixes to a copy of kwok's source; fails loudly if the code moved."""
    _patch(src / "pkg" / "utils" / "exec" / "exec.go", *_KWOK_STDIN, "stdin")
    _patch(src / "pkg" / "kwok" / "server" / "debugging_exec.go", *_KWOK_EXIT, "exit status")
    (src / "pkg" / "kwok" / "server" / "mlenv_exitcode.go").write_text(_KWOK_EXIT_GO)


def _tell(say: Callable[[str], None] | None, line: str) -> None:
    if say is not None:
        say(line)
