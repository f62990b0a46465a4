"""Named regression tests for the config side of the security review (the corpus in
tests/data/bad-configs/ holds the exact messages; these say which item each guards)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from mlenv.config import check_file

ROOT = Path(__file__).resolve().parents[3]
BASE = yaml.safe_load((ROOT / "clusters" / "local.yaml").read_text())


def errors_for(tmp_path: Path, patch: dict, name: str = "c.yaml") -> list[str]:
    data = {**BASE, **patch}
    f = tmp_path / name
    f.write_text(yaml.safe_dump(data))
    _, diags = check_file(f)
    return [d.format() for d in diags if d.severity == "error"]


@pytest.mark.parametrize("sa", ["default", "builder", "deployer", "pipeline"])
def test_builtin_service_accounts_are_refused(tmp_path: Path, sa: str) -> None:
    errs = errors_for(tmp_path, {"security": {"service_account": sa}})
    assert len(errs) == 1 and "built-in service account" in errs[0]


@pytest.mark.parametrize("value", ["a$b", "a`b`", "a\\b", 'a"b', "a'b", "a\nb", " lead"])
def test_nccl_env_values_the_pod_refuses_are_refused_by_validate(
    tmp_path: Path, value: str
) -> None:
    errs = errors_for(tmp_path, {"nccl": {"env": {"NCCL_ALGO": value}}})
    assert len(errs) == 1 and "nccl.env.NCCL_ALGO" in errs[0]


def test_gpu_resource_under_rdma_resources_is_refused(tmp_path: Path) -> None:
    errs = errors_for(
        tmp_path, {"network": {"rdma": {"enabled": False, "resources": {"nvidia.com/gpu": 8}}}}
    )
    assert len(errs) == 1 and "set gpus.per_node instead" in errs[0]


@pytest.mark.parametrize(
    "key,value",
    [
        ("ref", "quay.io/a/b:1\nkind: Secret"),
        ("ref", "-quay.io/a"),
        ("ref", "a b"),
    ],
)
def test_bad_image_refs_are_refused(tmp_path: Path, key: str, value: str) -> None:
    assert errors_for(tmp_path, {"image": {key: value}})


@pytest.mark.parametrize(
    "build,field",
    [
        ({"git_uri": "ext::sh -c id"}, "git_uri"),
        ({"git_uri": "file:///etc"}, "git_uri"),
        ({"git_uri": "--upload-pack=id"}, "git_uri"),
        ({"git_ref": "--upload-pack=id"}, "git_ref"),
        ({"git_ref": "main..evil"}, "git_ref"),
        ({"dockerfile_path": "../../etc/passwd"}, "dockerfile_path"),
        ({"dockerfile_path": "/etc/passwd"}, "dockerfile_path"),
    ],
)
def test_hostile_build_sources_are_refused(tmp_path: Path, build: dict, field: str) -> None:
    errs = errors_for(tmp_path, {"image": {"build": build}})
    assert errs and f"image.build.{field}" in errs[0]


def test_good_build_sources_pass(tmp_path: Path) -> None:
    assert (
        errors_for(
            tmp_path,
            {
                "image": {
                    "ref": "nvcr.io/nvidia/pytorch:25.01-py3",
                    "build": {
                        "git_uri": "https://github.com/org/repo.git",
                        "git_ref": "release/1.2",
                        "dockerfile_path": "docker/Dockerfile",
                    },
                }
            },
        )
        == []
    )


def test_newline_in_the_config_file_name_is_refused(tmp_path: Path) -> None:
    errs = errors_for(tmp_path, {}, name="evil\nname.yaml")
    assert len(errs) == 1 and "control character" in errs[0]


@pytest.mark.parametrize("key", ["class_rwx", "class_rwo"])
@pytest.mark.parametrize("value", ["--kubeconfig=/tmp/k", "-n", "Fast_SSD", "a b"])
def test_storage_class_names_must_be_dns_subdomains(tmp_path: Path, key: str, value: str) -> None:
    errs = errors_for(tmp_path, {"storage": {**BASE.get("storage", {}), key: value}})
    assert len(errs) == 1 and f"storage.{key}" in errs[0]


@pytest.mark.parametrize(
    "path,value",
    [
        (("cluster", "description"), "ok\x1b[2Jwiped"),
        (("cluster", "description"), "two\nlines"),
        (("gpus", "type"), "H100\rH200"),
        (("notes",), "fine\n\u202eevil"),
        (("notes",), "nul\x00"),
        (("cluster", "api"), "api.example.com; id"),
        (("cluster", "api"), "file:///etc/passwd"),
    ],
)
def test_free_text_control_characters_are_refused(
    tmp_path: Path, path: tuple[str, ...], value: str
) -> None:
    """Free text reaches terminals (list-clusters, deploy) and annotations: an ANSI escape
    or a bidi override would make what a reviewer sees differ from what is there."""
    patch: dict = (
        {path[0]: {**BASE.get(path[0], {}), path[1]: value}} if len(path) == 2 else {path[0]: value}
    )
    errs = errors_for(tmp_path, patch)
    assert len(errs) == 1 and ".".join(path) in errs[0]


def test_free_text_that_is_just_text_passes(tmp_path: Path) -> None:
    assert (
        errors_for(
            tmp_path,
            {
                "cluster": {
                    **BASE["cluster"],
                    "api": "https://api.x.example.com:6443",
                    "description": "NERC Barcelona cluster with H100 GPUs — ünïcode ok",
                },
                "gpus": {**BASE.get("gpus", {}), "type": "NVIDIA H100 80GB HBM3"},
                "notes": "line one\n\tline two\n",
            },
        )
        == []
    )
