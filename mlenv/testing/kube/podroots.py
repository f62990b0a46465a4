"""The tier's pod-root controller: what a kubelet would do before starting a container.

For every pod kwok is to run (scheduled on a kwok node), it

1. makes the pod's folder ``<tier>/pods/<namespace>/<pod>/`` (the overlay's upper layer
   is its ``upper/``: every write of the pod's processes lands there), its volumes'
   folders (a claim's volume: ``<tier>/volumes/<pv>/``, shared by every pod that mounts
   it and kept while the volume exists; an emptyDir: in the pod's folder; Secrets and
   ConfigMaps: their keys written as files) and its log file;
2. gives the pod its network (podnet.py: a holder process in a network namespace of its
   own, a veth on the plane's bridge, an address of the plane's range), as a CNI plugin
   does before the container starts;
3. writes the pod's kwok ``Exec`` (environment for confine.sh: the pod root, the volume
   mounts, the container's literal and field env) and ``Logs`` (its log file), owned by
   the pod so they go with it;
4. annotates the pod ``ROOT_READY`` and ``POD_IP`` (its address), which the pod-ready stage
   waits for and reports as ``status.podIP``;
5. writes every pod's ``/etc/hosts`` of the namespace (write_hosts).

When a pod is deleted its processes, network and folder go; a volume's folder goes when
its PV is gone.
Runs as ``python -m mlenv.testing.kube podroots TIER KUBECTL KUBECONFIG``.
"""

from __future__ import annotations

import base64
import calendar
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from mlenv.testing.kube import podnet
from mlenv.testing.kube.manifests import POD_IP, ROOT_READY, is_scale_pod

Obj = dict[str, Any]


# The longest grace period the tier gives a deleted pod (MLENV_KUBE_GRACE_S, seconds):
# a pod's own terminationGracePeriodSeconds (30 by default) when shorter. A real kubelet
# takes the whole period; tests that delete and recreate many times would wait minutes.
GRACE_CAP_S = 3.0
GRACE_CAP_ANNOTATION = "kube-tier.mlenv.dev/grace-cap-s"


def grace_cap() -> float:
    raw = os.environ.get("MLENV_KUBE_GRACE_S", "").strip()
    try:
        return max(0.0, float(raw)) if raw else GRACE_CAP_S
    except ValueError:
        return GRACE_CAP_S


def _deletion_due(pod: Obj, cap: float, now: float) -> float:
    """Seconds from ``now`` until the kubelet would SIGKILL the pod: its deletionTimestamp
    (delete time + grace period), at most ``cap`` after now."""
    stamp = str(pod["metadata"].get("deletionTimestamp", ""))
    try:
        left = calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ")) - now
    except ValueError:
        left = 0.0
    return max(0.0, min(left, cap))


def kill_pod_processes(pods: Path, sig: int = signal.SIGKILL) -> list[int]:
    """Send ``sig`` (SIGKILL by default) to every process running in a pod root under
    ``pods`` (a pod's folder, or the tier's ``pods/``): what a container runtime does when
    a pod goes (SIGTERM first, at the start of its grace period). kwok runs no
    container, so a daemon a pod's exec left behind (``mlenv.pod init`` starts sshd)
    would otherwise outlive its pod, and the tier. A confined process's root, read from
    the host, is its pod's ``merged`` overlay (confine.sh chroots there)."""
    killed = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            root = Path(os.readlink(proc / "root"))
        except OSError:
            continue
        if root.name == "merged" and (root == pods / "merged" or pods in root.parents):
            try:
                os.kill(int(proc.name), sig)
                killed.append(int(proc.name))
            except OSError:
                pass
    return killed


class Controller:
    def __init__(self, tier: Path, kubectl: str, kubeconfig: str) -> None:
        self.tier = tier
        self.base = [kubectl, f"--kubeconfig={kubeconfig}", "--request-timeout=20s"]
        self.log = sys.stderr
        self.net = podnet.load_plane_net(tier)
        self.cap = grace_cap()
        self.terminating: set[tuple[str, str, str]] = set()  # (ns, name, uid) in their grace

    def kubectl(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self.base, *args],
            input=stdin,
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )

    def say(self, line: str) -> None:
        self.log.write(f"{time.strftime('%H:%M:%S')} {line}\n")
        self.log.flush()

    def pod_dir(self, ns: str, name: str) -> Path:
        return self.tier / "pods" / ns / name

    def _volume_source(self, pod: Obj, vol: Obj) -> Path | None:
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        if "persistentVolumeClaim" in vol:
            claim = vol["persistentVolumeClaim"]["claimName"]
            res = self.kubectl("get", "pvc", "-n", ns, claim, "-o", "jsonpath={.spec.volumeName}")
            pv = res.stdout.strip()
            if res.returncode != 0 or not pv:
                return None
            return self.tier / "volumes" / pv
        folder: Path = self.pod_dir(ns, name) / "volumes" / str(vol["name"])
        folder.mkdir(parents=True, exist_ok=True)
        for kind, key in (("secret", "secretName"), ("configMap", "name")):
            if kind in vol:
                res = self.kubectl(
                    "get", kind.lower(), "-n", ns, vol[kind].get(key, ""), "-o", "json"
                )
                if res.returncode == 0:
                    obj = json.loads(res.stdout)
                    for k, v in (obj.get("data") or {}).items():
                        data = base64.b64decode(v) if kind == "secret" else str(v).encode()
                        (folder / k).write_bytes(data)
                        (folder / k).chmod(0o600 if kind == "secret" else 0o644)
        return folder

    def _env(self, pod: Obj, container: Obj) -> list[Obj]:
        meta = pod["metadata"]
        fields = {
            "metadata.name": meta["name"],
            "metadata.namespace": meta["namespace"],
            "spec.nodeName": pod["spec"].get("nodeName", ""),
            "spec.serviceAccountName": pod["spec"].get("serviceAccountName", ""),
        }
        out: dict[str, str] = {}
        for e in container.get("env") or []:
            if "value" in e:
                out[e["name"]] = str(e["value"])
            elif (e.get("valueFrom") or {}).get("fieldRef", {}).get("fieldPath") in fields:
                out[e["name"]] = fields[e["valueFrom"]["fieldRef"]["fieldPath"]]
        # What confine.sh reads; never taken from the pod's own env.
        for key in list(out):
            if key.startswith("MLENV_KUBE_") or key == "PATH":
                del out[key]
        venv_bin = str(Path(sys.executable).parent)
        out.update(
            {
                "HOSTNAME": meta["name"],
                "HOME": "/root",
                "MLENV_KUBE_PATH": f"{venv_bin}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "MLENV_KUBE_POD_NAME": meta["name"],
                "MLENV_KUBE_WORKDIR": container.get("workingDir") or "/",
            }
        )
        # The package as an image would have it installed (the checkout, read-only below).
        repo = str(Path(__file__).resolve().parents[3])
        out["PYTHONPATH"] = repo + (":" + out["PYTHONPATH"] if out.get("PYTHONPATH") else "")
        return [{"name": k, "value": v} for k, v in out.items()]

    def prepare(self, pod: Obj) -> bool:
        meta, spec = pod["metadata"], pod["spec"]
        ns, name = meta["namespace"], meta["name"]
        folder = self.pod_dir(ns, name)
        (folder / "upper").mkdir(parents=True, exist_ok=True)
        container = spec["containers"][0]
        vols = {v["name"]: v for v in spec.get("volumes") or []}
        mounts = []
        for vm in container.get("volumeMounts") or []:
            vol = vols.get(vm["name"])
            if vol is None:
                continue
            src = self._volume_source(pod, vol)
            if src is None:
                return False  # its claim is not bound yet: try again on the next event
            if vm.get("subPath"):
                src = src / vm["subPath"]
            src.mkdir(parents=True, exist_ok=True)
            mounts.append(f"{vm['mountPath']}={src}")
        logfile = folder / "container.log"
        if not logfile.exists():
            # The CRI log format (time, stream, P/F tag, text), which kwok's log reader parses.
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000000000Z", time.gmtime())
            logfile.write_text(
                f"{stamp} stdout F kube tier: {ns}/{name} container {container['name']} started on "
                f"{spec.get('nodeName')} (kwok: no container runtime; its command is not run)\n"
            )
        if self.net is None:
            self.say(f"{ns}/{name}: the plane has no pod network ({self.tier / podnet.NET_FILE})")
            return False
        old = podnet.read_record(folder)
        if old is not None and old.uid != meta["uid"]:
            # a pod of the same name before this one, whose deletion the watch missed
            kill_pod_processes(folder)
        try:
            net = podnet.attach(folder, self.net, meta["uid"])
        except podnet.NetError as e:
            self.say(f"{ns}/{name}: no network: {e}")
            return False
        env = [
            *self._env(pod, container),
            {"name": "MLENV_KUBE_POD_ROOT", "value": str(folder)},
            {"name": "MLENV_KUBE_MOUNTS", "value": "\n".join(mounts)},
        ]
        owner = [{"apiVersion": "v1", "kind": "Pod", "name": name, "uid": meta["uid"]}]
        objs = {
            "apiVersion": "v1",
            "kind": "List",
            "items": [
                {
                    "apiVersion": "kwok.x-k8s.io/v1alpha1",
                    "kind": "Exec",
                    "metadata": {"name": name, "namespace": ns, "ownerReferences": owner},
                    "spec": {"execs": [{"local": {"envs": env}}]},
                },
                {
                    "apiVersion": "kwok.x-k8s.io/v1alpha1",
                    "kind": "Logs",
                    "metadata": {"name": name, "namespace": ns, "ownerReferences": owner},
                    "spec": {"logs": [{"logsFile": str(logfile), "follow": True}]},
                },
            ],
        }
        res = self.kubectl("apply", "-f", "-", stdin=json.dumps(objs))
        if res.returncode != 0:
            self.say(f"{ns}/{name}: Exec/Logs not written: {res.stderr.strip()}")
            return False
        # /etc/hosts before the pod can start (ROOT_READY): its own name at its address, and
        # every prepared pod's, so the others learn this one's too (written once: the
        # annotation below changes nothing in them)
        self.write_hosts(ns, {name: net.ip})
        res = self.kubectl(
            "annotate",
            "pod",
            "-n",
            ns,
            name,
            f"{ROOT_READY}=true",
            f"{POD_IP}={net.ip}",
            "--overwrite",
        )
        if res.returncode != 0:
            self.say(f"{ns}/{name}: not annotated: {res.stderr.strip()}")
            return False
        self.say(f"{ns}/{name}: root ready ({len(mounts)} mounts), address {net.ip}")
        return True

    def write_hosts(self, ns: str, known: dict[str, str] | None = None) -> None:
        """Each prepared pod's ``/etc/hosts`` (in its overlay's upper layer): this machine's,
        the pod's own name at its address (as the kubelet writes it), and every pod of the
        namespace with a hostname and subdomain (a StatefulSet's pods behind its headless
        Service) by the names cluster DNS would give them, at its address. The tier has no
        cluster DNS, so this is how pod 0's launcher and rendezvous name reach the other
        pods. An address is the pod's ``POD_IP`` annotation, or ``known``'s (a pod
        whose annotation is not written yet)."""
        res = self.kubectl("get", "pods", "-n", ns, "-o", "json")
        if res.returncode != 0:
            return
        addresses = dict(known or {})
        names = []
        for p in json.loads(res.stdout or "{}").get("items") or []:
            meta = p["metadata"]
            ip = addresses.get(meta["name"]) or (meta.get("annotations") or {}).get(POD_IP)
            if not ip or meta.get("deletionTimestamp"):
                continue
            addresses[meta["name"]] = ip
            host, sub = p["spec"].get("hostname"), p["spec"].get("subdomain")
            if host and sub:
                fq = f"{host}.{sub}.{ns}.svc"
                names.append(f"{ip}\t{fq}.cluster.local {fq} {host}.{sub} {host}\n")
        base = (
            Path("/etc/hosts").read_text()
            if Path("/etc/hosts").is_file()
            else "127.0.0.1\tlocalhost\n"
        )
        base += "" if base.endswith("\n") else "\n"
        for upper in (self.tier / "pods" / ns).glob("*/upper"):
            pod = upper.parent.name
            own = f"{addresses[pod]}\t{pod}\n" if pod in addresses else ""
            text = (
                base
                + "# kube tier: this pod\n"
                + own
                + "# kube tier: the namespace's pods\n"
                + "".join(sorted(names))
            )
            etc = upper / "etc"
            etc.mkdir(exist_ok=True)
            tmp = etc / ".hosts.tmp"
            tmp.write_text(text)
            os.replace(tmp, etc / "hosts")

    def forget(self, ns: str, name: str) -> None:
        folder = self.pod_dir(ns, name)
        if folder.is_dir() and (self.tier / "pods") in folder.parents:
            for pid in kill_pod_processes(folder):
                self.say(f"{ns}/{name}: killed process {pid} left in the pod")
            net = podnet.release(folder)
            if net is not None:
                self.say(f"{ns}/{name}: network released ({net.ip}, {net.veth})")
            subprocess.run(
                ["umount", "-R", str(folder / "merged")], capture_output=True, check=False
            )
            shutil.rmtree(folder, ignore_errors=True)
            self.write_hosts(ns)
        res = self.kubectl("get", "pv", "-o", "jsonpath={.items[*].metadata.name}")
        if res.returncode == 0:
            live = set(res.stdout.split())
            vols = self.tier / "volumes"
            for d in vols.iterdir() if vols.is_dir() else []:
                if d.name not in live:
                    shutil.rmtree(d, ignore_errors=True)

    def terminate(self, pod: Obj) -> None:
        """A deleted pod's grace period, as a kubelet runs it: SIGTERM to its processes
        now, SIGKILL at its deletionTimestamp (at most ``cap`` seconds on), then the pod
        object goes (a delete with no grace left, as the kubelet's final status does).
        kwok's pod-delete stage waits for the deletionTimestamp too: a tier without this
        controller still keeps the grace, uncapped."""
        meta = pod["metadata"]
        key = (meta["namespace"], meta["name"], str(meta.get("uid", "")))
        if key in self.terminating:
            return
        self.terminating.add(key)
        if (self.pod_dir(key[0], key[1]) / "merged").is_dir():
            kill_pod_processes(self.pod_dir(key[0], key[1]), signal.SIGTERM)
        due = _deletion_due(pod, self.namespace_cap(key[0]), time.time())
        self.say(f"{key[0]}/{key[1]}: Terminating: SIGTERM sent, removed in {due:.1f} s")
        timer = threading.Timer(due, self._finish, key)
        timer.daemon = True
        timer.start()

    def namespace_cap(self, ns: str) -> float:
        """The tier's cap, or the namespace's own (annotation GRACE_CAP_ANNOTATION, for a
        test that needs deletes to take longer than the plane's default)."""
        res = self.kubectl("get", "namespace", ns, "--output=jsonpath={.metadata.annotations}")
        try:
            notes = json.loads(res.stdout or "{}") if res.returncode == 0 else {}
            return max(0.0, float(notes.get(GRACE_CAP_ANNOTATION, self.cap)))
        except (ValueError, AttributeError):
            return self.cap

    def _finish(self, ns: str, name: str, uid: str) -> None:
        if (self.pod_dir(ns, name) / "merged").is_dir():
            kill_pod_processes(self.pod_dir(ns, name))
        # only this pod: a successor of the same name is not ours to delete (a StatefulSet
        # makes one only once this one is gone, so the window is the two calls' time)
        live = self.kubectl(
            "get",
            "pod",
            f"--namespace={ns}",
            name,
            "--ignore-not-found",
            "--output=jsonpath={.metadata.uid}",
        )
        if live.returncode != 0 or live.stdout.strip() != uid:
            return
        res = self.kubectl(
            "delete",
            "pod",
            f"--namespace={ns}",
            name,
            "--grace-period=0",
            "--force",
            "--wait=false",
            "--ignore-not-found",
        )
        if res.returncode != 0:
            self.say(f"{ns}/{name}: delete at the end of its grace failed: {res.stderr.strip()}")

    def handle(self, kind: str, pod: Obj) -> bool:
        """Act on one watch event; False when the pod must be looked at again."""
        meta = pod["metadata"]
        ns, name = meta["namespace"], meta["name"]
        if kind == "DELETED":
            self.terminating.discard((ns, name, str(meta.get("uid", ""))))
            self.forget(ns, name)
            return True
        if meta.get("deletionTimestamp"):
            self.terminate(pod)
            return True
        # unscheduled, or on a scale node (kwok-only: no root, no network of its own)
        if not pod["spec"].get("nodeName") or is_scale_pod(pod):
            return True
        if (meta.get("annotations") or {}).get(ROOT_READY) and (
            self.pod_dir(ns, name) / "upper"
        ).is_dir():
            return True
        return self.prepare(pod)

    def run(self) -> None:
        # The watch ends every 10 s and starts again with a fresh list (every pod ADDED):
        # a pod that could not be prepared (its claim not bound yet) is tried again then.
        while True:
            proc = subprocess.Popen(
                [
                    *self.base[:-1],
                    "--request-timeout=10s",
                    "get",
                    "pods",
                    "-A",
                    "--watch",
                    "-o",
                    "json",
                    "--output-watch-events",
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
            assert proc.stdout is not None
            decoder, buf = json.JSONDecoder(), ""
            for line in proc.stdout:
                buf += line
                while buf.strip():
                    try:
                        event, end = decoder.raw_decode(buf.lstrip())
                    except ValueError:
                        break
                    buf = buf.lstrip()[end:]
                    pod = event.get("object") or {}
                    key = (
                        pod.get("metadata", {}).get("namespace", ""),
                        pod.get("metadata", {}).get("name", ""),
                    )
                    try:
                        self.handle(event.get("type", ""), pod)
                    except (OSError, subprocess.SubprocessError, KeyError, ValueError) as e:
                        self.say(f"{key[0]}/{key[1]}: {type(e).__name__}: {e}")
            proc.wait()
            time.sleep(0.2)


def main(argv: list[str]) -> int:
    tier, kubectl, kubeconfig = argv
    os.umask(0o022)
    Controller(Path(tier), kubectl, kubeconfig).run()
    return 0
