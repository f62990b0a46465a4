"""The Slurm job a run names: its id, Slurm's ClusterName and the control host."""

from __future__ import annotations

from mlenv.acceptance.reports.document import batch_job


def test_a_job_names_its_cluster_and_control_host() -> None:
    env = {"SLURM_JOB_ID": "41", "SLURM_CLUSTER_NAME": "alps", "SLURM_SUBMIT_HOST": "login1.site"}
    assert batch_job(env) == {
        "scheduler": "slurm",
        "id": "41",
        "cluster": "alps",
        "control_host": "login1.site",
    }


def test_a_name_that_is_not_a_host_word_is_left_out() -> None:
    env = {"SLURM_JOB_ID": "41", "SLURM_CLUSTER_NAME": "a\x1b[2J", "SLURM_SUBMIT_HOST": "-x"}
    assert batch_job(env) == {"scheduler": "slurm", "id": "41"}


def test_no_job_outside_slurm() -> None:
    assert batch_job({"SLURM_CLUSTER_NAME": "alps"}) is None
