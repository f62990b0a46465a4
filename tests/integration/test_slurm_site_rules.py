"""A site rule on the real Slurm harness: a ``job_submit.lua`` that refuses any job in the
partition that asks for no GPU (as GPU sites write it; ``slurm.log_user`` is what the
user sees). mlenv's probe, ``shell`` and the batch job ask for the job's GPUs, so the run
goes through; a job that asks for none is refused with the site's own words, whole. The
job carries a ``--comment`` of ``Key=value`` words, which status and logs do not take
for Slurm's own fields.
The nodes declare GPU GRES by count only: the ranks stay on CPU.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import slurm as slurm_harness
from test_slurm import CLUSTER, Env, _skip_reason

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("slurm")]

RULE = "Jobs in partition debug must request at least one GPU (--gpus-per-node=N)"
GPU_RULE = f"""
function slurm_job_submit(job_desc, part_list, submit_uid)
  local tres = (job_desc.tres_per_node or "") .. (job_desc.tres_per_job or "")
      .. (job_desc.tres_per_task or "") .. (job_desc.tres_per_socket or "")
  if not string.find(tres, "gpu") then
    slurm.log_user("{RULE}")
    slurm.log_user("see https://hpc.example.org/gpu-partition")
    return slurm.ERROR
  end
  return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
  return slurm.SUCCESS
end
"""


def config(shared: Path, gpus_flag: str, extra: str = "") -> str:
    return (
        f"cluster:\n  name: {CLUSTER}\nplatform: slurm\n"
        f'slurm:\n  partition: debug\n  time_limit: "00:10:00"\n  exclusive: false\n'
        f"  gpus_flag: {gpus_flag}\n  shared_dir: {shared}\n  python: {sys.executable}\n{extra}"
        "network:\n  tcp:\n    interface_exclude: lo\n"
        "gpus:\n  per_node: 1\n  type: cpu\n  default_nodes: 2\n"
    )


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    why = _skip_reason()
    if why:
        pytest.skip(why)
    root = tmp_path_factory.mktemp("slurm-site")
    (root / "clusters").mkdir()
    (root / "shared").mkdir()
    with slurm_harness.on_netns_hosts(str(root), gpus=1, job_submit_lua=GPU_RULE) as sl:
        yield Env(root, sl)


def _use(env: Env, text: str) -> None:
    (env.root / "clusters" / f"{CLUSTER}.yaml").write_text(text)


def test_the_rule_is_on(env: Env) -> None:
    r = env.slurm.run("srun", "-N1", "--immediate=30", "true")
    assert r.returncode != 0 and RULE in r.stderr, r.stderr


# A site's --comment of Key=value words: status and logs read Slurm's fields, not these.
COMMENT = "--comment=JobState=FAILED StdOut=/nonexistent/x.out NodeList=evil[1-2]"


def test_shell_and_the_probe_ask_for_the_job_s_gpus_and_the_run_passes(env: Env) -> None:
    _use(env, config(env.shared, "gpus-per-node", f"  sbatch_args: [{COMMENT!r}]\n"))
    r = env.mlenv("shell", CLUSTER, "--", "sh", "-c", "echo gpus=$SLURM_GPUS_ON_NODE")
    assert r.returncode == 0 and r.stdout.strip() == "gpus=1", r.stdout + r.stderr
    env.slurm.wait_idle(90)
    r = env.mlenv("deploy", CLUSTER, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "preflight: node " in r.stdout and "mlenv importable" in r.stdout, r.stdout
    state = env.wait_job_end(env.record()["job_id"], timeout=240)
    assert state == "COMPLETED", env.mlenv("logs", CLUSTER).stdout
    st = env.mlenv("status", CLUSTER)
    assert st.returncode == 0 and "): COMPLETED" in st.stdout, st.stdout + st.stderr
    assert "evil" not in st.stdout and all(f"node {n}:" in st.stdout for n in env.slurm.nodes)
    logs = env.mlenv("logs", CLUSTER, "--tail", "5")
    assert logs.returncode == 0 and "verdict:" in logs.stdout, logs.stdout + logs.stderr


def test_a_refused_probe_and_job_print_the_site_s_whole_message(env: Env) -> None:
    _use(env, config(env.shared, "none"))
    r = env.mlenv("deploy", CLUSTER, timeout=120)
    assert r.returncode == 3, r.stdout + r.stderr
    assert RULE in r.stderr and "gpu-partition" in r.stderr, r.stderr
    assert "import probe" in r.stderr and "slurm.import_probe: false" in r.stderr
    # the probe off: sbatch itself is refused, with the site's lines too
    _use(env, config(env.shared, "none", "  import_probe: false\n"))
    r = env.mlenv("deploy", CLUSTER, timeout=120)
    assert r.returncode == 3, r.stdout + r.stderr
    assert "sbatch failed" in r.stderr and RULE in r.stderr and "gpu-partition" in r.stderr
    assert "import probe is off" in r.stdout + r.stderr
