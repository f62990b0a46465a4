"""Real multi-node "pods" on one machine: a network namespace per pod on a private bridge.

Each pod is ``ip netns exec <ns> unshare --mount --uts --pid --fork --mount-proc`` whose
first process (PID 1 of its PID namespace) just sleeps; everything else joins it with
``nsenter``. Per pod: its own hostname ``ml-dev-env-<i>``, an address on the bridge, and
its own /etc/hosts (bind-mounted in its mount namespace) mapping every pod's
``ml-dev-env-<i>.ml-dev-env-headless.<ns>.svc`` name AND its own hostname to bridge
addresses: gloo advertises whatever the hostname resolves to, and 127.0.0.1 would send
peers to themselves.

Teardown kills each namespace's PID 1 (the kernel then kills everything in it), not the
DeepSpeed launcher: SIGTERM to the launcher runs ``pdsh … pkill -f`` on every node,
which would hit unrelated processes of the same name. It then waits until the network
namespaces and links are really gone so the next setup starts clean.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

# Machine-wide claims of the 10.231.x/24 subnets, shared by every test worker and run.
SUBNETS = "/run/mlenv-netns-subnets"

TOOLS = ("ip", "unshare", "nsenter", "ssh", "ssh-keygen", "pdsh", "mount")


def run_bounded(p: subprocess.Popen[str], timeout: float) -> subprocess.CompletedProcess[str]:
    """Wait for ``p`` (started with ``start_new_session=True``) and its output, never much
    past ``timeout``: on expiry its whole process group is killed, and if a descendant
    that left the group still holds the pipe, the pipe is abandoned rather than read to
    EOF (``communicate()`` after ``kill()`` blocked on a grandchild's stdout)."""
    try:
        out, _ = p.communicate(timeout=timeout)
        return subprocess.CompletedProcess(p.args, p.returncode, out, "")
    except subprocess.TimeoutExpired:
        pass
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(p.pid, signal.SIGKILL)
    p.kill()
    try:
        out, _ = p.communicate(timeout=5)
    except subprocess.TimeoutExpired:
        if p.stdout is not None:
            p.stdout.close()
        p.wait()
        out = ""
    return subprocess.CompletedProcess(p.args, 124, out or "", "")


class HarnessUnavailable(RuntimeError):
    """This machine cannot host the harness (not root, a tool missing, netns refused)."""


def unavailable_reason() -> str | None:
    """Why the harness cannot run here, or None when it can (cheap; creates one netns)."""
    if os.geteuid() != 0:
        return "the netns harness needs root"
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if not (shutil.which("sshd") or os.path.exists("/usr/sbin/sshd")):
        missing.append("sshd")
    if missing:
        return f"missing tools: {', '.join(missing)} (make system-deps)"
    probe = f"mlenvprobe{secrets.token_hex(3)}"
    r = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True, check=False)
    if r.returncode != 0:
        return f"'ip netns add' failed: {r.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True, check=False)
    return None


def _ip(*args: str, ns: str | None = None) -> None:
    argv = (["ip", "netns", "exec", ns, "ip"] if ns else ["ip"]) + list(args)
    r = subprocess.run(argv, capture_output=True, text=True, check=False)
    if r.returncode != 0:
        raise HarnessUnavailable(f"{' '.join(argv)}: {r.stderr.strip()}")


def keypair(path: str) -> None:
    """An ed25519 key pair at ``path`` / ``path.pub`` (no passphrase)."""
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "mlenv-test", "-f", path],
        check=True,
        capture_output=True,
    )


@dataclass
class Pod:
    """One running pod: its namespace names and the host PID of its PID 1."""

    index: int
    netns: str
    hostname: str
    address: str
    dir: str
    unshare: subprocess.Popen[bytes]
    pid1: int = 0


@dataclass
class Cluster:
    """N pods of the ``ml-dev-env`` StatefulSet in namespace ``namespace``, on one machine."""

    n: int
    root: str
    namespace: str = "mlenv-test"
    statefulset: str = "ml-dev-env"
    headless: str = "ml-dev-env-headless"
    tag: str = field(default_factory=lambda: secrets.token_hex(3))
    pods: list[Pod] = field(default_factory=list)
    setup_s: float = 0.0
    teardown_s: float = 0.0
    octet: int = -1

    @property
    def bridge(self) -> str:
        return f"mlb{self.tag}"

    @property
    def secret_dir(self) -> str:
        """Stands in for the mounted ``ml-dev-env-ssh`` Secret."""
        return os.path.join(self.root, "secret")

    def dns(self, i: int) -> str:
        return f"{self.statefulset}-{i}.{self.headless}.{self.namespace}.svc"

    def _subnet(self) -> str:
        """This cluster's /24 (without the last octet), claimed for it in ``setup``.

        The pods' addresses live in their own namespaces, but the Slurm and hosts harnesses
        give this machine ``<subnet>.1`` on the bridge: two clusters alive at once with the
        same /24 would route one's traffic to the other's pods (ssh then met a Slurm node
        with no sshd: "connection refused"). So the octet is claimed machine-wide."""
        if self.octet < 0:
            raise HarnessUnavailable("the cluster has no subnet before setup()")
        return f"10.231.{self.octet}"

    def _claim_subnet(self) -> None:
        """Claim a third octet no other live cluster holds and this machine does not route.

        A claim is a file ``SUBNETS/<octet>`` made with O_EXCL holding the claimer's PID;
        a claim whose PID is gone (a killed test run) is taken over."""
        os.makedirs(SUBNETS, exist_ok=True)
        routed = set(
            int(m)
            for m in re.findall(
                r"\b10\.231\.(\d+)\.",
                subprocess.run(
                    ["ip", "-4", "route", "show", "table", "all"],
                    capture_output=True,
                    text=True,
                    check=False,
                ).stdout,
            )
        )
        start = int(self.tag[:2], 16)
        for k in range(256):
            octet = (start + k) % 256
            if octet in routed or octet in (0, 255):
                continue
            path = os.path.join(SUBNETS, str(octet))
            for _ in range(2):
                try:
                    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
                except FileExistsError:
                    if _claim_alive(path):
                        break
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(path)
                    continue
                with os.fdopen(fd, "w", encoding="ascii") as f:
                    f.write(f"{os.getpid()}\n")
                self.octet = octet
                return
        raise HarnessUnavailable(f"no free 10.231.x/24 subnet (claims in {SUBNETS})")

    def _release_subnet(self) -> None:
        if self.octet < 0:
            return
        path = os.path.join(SUBNETS, str(self.octet))
        with contextlib.suppress(OSError):
            with open(path, encoding="ascii") as f:
                mine = f.read().strip() == str(os.getpid())
            if mine:
                os.unlink(path)
        self.octet = -1

    def setup(self) -> None:
        """Create the bridge, the pods and the Secret; raises HarnessUnavailable on failure."""
        t0 = time.monotonic()
        os.makedirs(self.secret_dir, exist_ok=True)
        keypair(os.path.join(self.secret_dir, "id_ed25519"))
        keypair(os.path.join(self.secret_dir, "ssh_host_ed25519_key"))
        self._claim_subnet()
        net = self._subnet()
        addrs = [f"{net}.{10 + i}" for i in range(self.n)]
        hosts_lines = ["127.0.0.1 localhost", "::1 localhost"]
        hosts_lines += [f"{a} {self.dns(i)} {self.statefulset}-{i}" for i, a in enumerate(addrs)]
        try:
            _ip("link", "add", self.bridge, "type", "bridge")
            _ip("link", "set", self.bridge, "up")
            for i in range(self.n):
                self.pods.append(self._start_pod(i, addrs[i], "\n".join(hosts_lines) + "\n"))
            for pod in self.pods:
                self._wait_ready(pod)
        except BaseException:
            self.teardown()
            raise
        self.setup_s = time.monotonic() - t0

    def _start_pod(self, i: int, addr: str, hosts: str) -> Pod:
        ns = f"mlenv{self.tag}-{i}"
        d = os.path.join(self.root, f"pod{i}")
        os.makedirs(os.path.join(d, "home"), exist_ok=True)
        with open(os.path.join(d, "hosts"), "w", encoding="utf-8") as f:
            f.write(hosts)
        _ip("netns", "add", ns)
        veth, peer = f"v{self.tag}{i}h", f"v{self.tag}{i}p"
        _ip("link", "add", veth, "type", "veth", "peer", "name", peer)
        _ip("link", "set", peer, "netns", ns)
        _ip("link", "set", veth, "master", self.bridge, "up")
        _ip("link", "set", "lo", "up", ns=ns)
        _ip("addr", "add", f"{addr}/24", "dev", peer, ns=ns)
        _ip("link", "set", peer, "up", ns=ns)
        hostname = f"{self.statefulset}-{i}"
        script = (
            f"mount --bind {shlex.quote(os.path.join(d, 'hosts'))} /etc/hosts "
            f"&& hostname {shlex.quote(hostname)} && mkdir -p /run/sshd && exec sleep infinity"
        )
        proc = subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                ns,
                "unshare",
                "--mount",
                "--uts",
                "--pid",
                "--fork",
                "--mount-proc",
                "--propagation",
                "private",
                "sh",
                "-c",
                script,
            ],
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        return Pod(i, ns, hostname, addr, d, proc)

    def _wait_ready(self, pod: Pod, timeout: float = 20.0) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if pod.unshare.poll() is not None:
                err = pod.unshare.stderr.read().decode() if pod.unshare.stderr else ""
                raise HarnessUnavailable(f"pod {pod.index} namespace setup failed: {err.strip()}")
            kids = _children(pod.unshare.pid)
            if kids and not pod.pid1:
                pod.pid1 = kids[0]
            if pod.pid1 and _comm(pod.pid1) == "sleep":
                return
            time.sleep(0.02)
        raise HarnessUnavailable(f"pod {pod.index} did not come up in {timeout:g} s")

    def env(self, i: int, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment the StatefulSet would give pod ``i`` (docs/contracts.md)."""
        pod = self.pods[i]
        venv_bin = os.path.dirname(os.path.abspath(sys.executable))
        env = {
            "PATH": f"{venv_bin}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": os.path.join(pod.dir, "home"),
            "LANG": "C.UTF-8",
            "MLENV_CLUSTER": "harness",
            "MLENV_NAMESPACE": self.namespace,
            "MLENV_POD_NAME": pod.hostname,
            "MLENV_STATEFULSET": self.statefulset,
            "MLENV_HEADLESS_SERVICE": self.headless,
            "MLENV_NNODES": str(self.n),
            "MLENV_GPUS_PER_NODE": "0",
            "MLENV_NETWORK_MODE": "tcp",
            "MLENV_SSH_PORT": "2222",
            "MLENV_SSH_DIR": self.secret_dir,
            "MLENV_WORKSPACE": os.path.join(self.root, "workspace"),
            "MASTER_ADDR": self.dns(0),
            "MASTER_PORT": "29500",
            "DS_ACCELERATOR": "cpu",
            "TORCH_EXTENSIONS_DIR": os.environ.get(
                "TORCH_EXTENSIONS_DIR", os.path.expanduser("~/.cache/mlenv/torch_extensions")
            ),
            "OMP_NUM_THREADS": "1",
            "NCCL_DEBUG": "WARN",
        }
        if extra:
            env.update(extra)
        return env

    def popen(
        self,
        i: int,
        argv: Sequence[str],
        env: Mapping[str, str],
        cwd: str | None = None,
        user: tuple[int, int] | None = None,
        **kw: object,
    ) -> subprocess.Popen[str]:
        """Start ``argv`` inside pod ``i`` (all its namespaces).

        ``user``: ``(uid, gid)`` to run as, with no supplementary groups, like a pod under
        OpenShift's random UID (the harness itself is root).
        """
        pod = self.pods[i]
        drop = (
            []
            if user is None
            else ["setpriv", f"--reuid={user[0]}", f"--regid={user[1]}", "--clear-groups", "--"]
        )
        # --wd: entering the mount namespace would otherwise leave us in the target's cwd (/).
        full = [
            "nsenter",
            "-t",
            str(pod.pid1),
            "--mount",
            "--uts",
            "--net",
            "--pid",
            f"--wd={cwd or self.root}",
            "--",
            *drop,
            *argv,
        ]
        return subprocess.Popen(full, env=dict(env), text=True, **kw)  # type: ignore[call-overload]

    def run(
        self,
        i: int,
        argv: Sequence[str],
        env: Mapping[str, str],
        timeout: float = 120,
        cwd: str | None = None,
        user: tuple[int, int] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` in pod ``i`` to completion, capturing output."""
        p = self.popen(
            i,
            argv,
            env,
            cwd=cwd,
            user=user,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        return run_bounded(p, timeout)

    def bind_file(self, i: int, src: str, dst: str) -> None:
        """Bind-mount ``src`` over ``dst`` in pod ``i``'s own mount namespace (e.g. /etc/passwd)."""
        r = self.run(i, ["mount", "--bind", src, dst], dict(os.environ), timeout=20)
        if r.returncode != 0:
            raise HarnessUnavailable(f"pod {i}: mount --bind {src} {dst}: {r.stdout.strip()}")

    def expose_path(self, i: int, path: str) -> None:
        """Make ``path`` reachable by any UID inside pod ``i`` without touching the host.

        A developer's interpreter often lives under a directory only root may search
        (pyenv in /root). For each such ancestor, pod ``i``'s mount namespace gets a 0755
        tmpfs over it holding just the bind-mounted branch that leads to ``path``.
        """
        target = os.path.realpath(path)
        parts = target.strip("/").split("/")
        for depth in range(len(parts) - 1):
            ancestor = "/" + "/".join(parts[:depth])
            r = self.run(
                i, ["sh", "-c", f"stat -c %a {shlex.quote(ancestor)}"], dict(os.environ), timeout=20
            )
            if r.returncode != 0 or int(r.stdout.strip(), 8) & 0o001:
                continue
            branch = os.path.join(ancestor, parts[depth])
            stash = os.path.join(self.root, f"stash{i}-{depth}")
            os.makedirs(stash, exist_ok=True)
            q = shlex.quote
            script = (
                f"mount --bind {q(branch)} {q(stash)} && mount -t tmpfs -o mode=0755 tmpfs {q(ancestor)} "
                f"&& mkdir {q(branch)} && mount --move {q(stash)} {q(branch)}"
            )
            r = self.run(i, ["sh", "-c", script], dict(os.environ), timeout=20)
            if r.returncode != 0:
                raise HarnessUnavailable(f"pod {i}: cannot expose {target}: {r.stdout.strip()}")

    # -- traffic control (additive: slow a pod's link or one path, like a bad NIC or cable) --

    def veths(self, i: int) -> tuple[str, str]:
        """Pod ``i``'s veth pair: (the bridge side, in the host; the pod side, in its namespace)."""
        return f"v{self.tag}{i}h", f"v{self.tag}{i}p"

    def _tc(self, i: int, *args: str, inside: bool) -> None:
        dev = self.veths(i)[1 if inside else 0]
        argv = (["ip", "netns", "exec", self.pods[i].netns] if inside else []) + ["tc", *args]
        argv = [dev if a == "{dev}" else a for a in argv]
        r = subprocess.run(argv, capture_output=True, text=True, check=False)
        if r.returncode != 0:
            raise HarnessUnavailable(f"{' '.join(argv)}: {r.stderr.strip()}")

    def shape_pod(self, i: int, rate: str = "20mbit") -> None:
        """Slow every link of pod ``i``: a ``tbf`` rate limit on both ends of its veth (both directions)."""
        for inside in (False, True):
            self._tc(
                i,
                "qdisc",
                "add",
                "dev",
                "{dev}",
                "root",
                "tbf",
                "rate",
                rate,
                "burst",
                "32kbit",
                "latency",
                "50ms",
                inside=inside,
            )

    def shape_path(self, i: int, j: int, rate: str = "20mbit") -> None:
        """Slow only what pod ``i`` sends to pod ``j``: ``htb`` on ``i``'s veth, a ``u32`` filter on
        ``j``'s address steering into a ``rate`` class; everything else goes to an unlimited class."""
        self.shape_paths(i, [j], rate)

    def shape_paths(self, i: int, dsts: Sequence[int], rate: str = "20mbit") -> None:
        """Slow what pod ``i`` sends to each of ``dsts`` (each path its own ``rate`` class): the
        pods of a rack behind a slow uplink, when every other rack is in ``dsts``."""
        self._tc(
            i,
            "qdisc",
            "add",
            "dev",
            "{dev}",
            "root",
            "handle",
            "1:",
            "htb",
            "default",
            "20",
            inside=True,
        )
        self._tc(
            i,
            "class",
            "add",
            "dev",
            "{dev}",
            "parent",
            "1:",
            "classid",
            "1:20",
            "htb",
            "rate",
            "100gbit",
            inside=True,
        )
        for k, j in enumerate(dsts):
            cls = f"1:{100 + k}"
            self._tc(
                i,
                "class",
                "add",
                "dev",
                "{dev}",
                "parent",
                "1:",
                "classid",
                cls,
                "htb",
                "rate",
                rate,
                "burst",
                "32kbit",
                inside=True,
            )
            self._tc(
                i,
                "filter",
                "add",
                "dev",
                "{dev}",
                "protocol",
                "ip",
                "parent",
                "1:",
                "prio",
                "1",
                "u32",
                "match",
                "ip",
                "dst",
                f"{self.pods[j].address}/32",
                "flowid",
                cls,
                inside=True,
            )

    def unshape(self, i: int) -> None:
        """Remove any shaping of pod ``i`` (both ends of its veth); no error when there is none."""
        for inside in (False, True):
            dev = self.veths(i)[1 if inside else 0]
            argv = (["ip", "netns", "exec", self.pods[i].netns] if inside else []) + [
                "tc",
                "qdisc",
                "del",
                "dev",
                dev,
                "root",
            ]
            subprocess.run(argv, capture_output=True, check=False)

    def kill_pod(self, i: int) -> None:
        """End every process of pod ``i`` at once (SIGKILL to its PID 1)."""
        pod = self.pods[i]
        if pod.pid1:
            try:
                os.kill(pod.pid1, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            pod.unshare.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(pod.unshare.pid, signal.SIGKILL)
            pod.unshare.wait(timeout=10)

    def teardown(self) -> None:
        """Kill every pod, delete namespaces and links, and wait until they are gone."""
        t0 = time.monotonic()
        for pod in self.pods:
            self.kill_pod(pod.index)
            if pod.unshare.stderr:
                pod.unshare.stderr.close()
        for pod in self.pods:
            subprocess.run(["ip", "netns", "del", pod.netns], capture_output=True, check=False)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True, check=False)
        end = time.monotonic() + 20
        while time.monotonic() < end:
            names = subprocess.run(
                ["ip", "-o", "link"], capture_output=True, text=True, check=False
            ).stdout
            nss = subprocess.run(
                ["ip", "netns", "list"], capture_output=True, text=True, check=False
            ).stdout
            if (
                f"mlenv{self.tag}-" not in nss
                and f"v{self.tag}" not in names
                and self.bridge not in names
            ):
                break
            time.sleep(0.05)
        self.pods = []
        self._release_subnet()
        self.teardown_s = time.monotonic() - t0


def _claim_alive(path: str) -> bool:
    """Whether the subnet claim at ``path`` belongs to a live process."""
    try:
        with open(path, encoding="ascii") as f:
            text = f.read().strip()
        age = time.time() - os.stat(path).st_mtime
    except OSError:
        return True
    if not text.isdigit():
        # just made, its PID not written yet; one left empty by a crash expires
        return age < 10
    pid = int(text)
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children", encoding="ascii") as f:
                out += [int(x) for x in f.read().split()]
    except OSError:
        pass
    return out


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm", encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return ""
