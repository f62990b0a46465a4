"""``.deepspeed_env``: what is forwarded, and that values survive the launcher's parsing."""

from __future__ import annotations

import subprocess

import pytest

from mlenv.errors import InputError
from mlenv.pod import dsenv

ENV = {
    "PATH": "/opt/venv/bin:/usr/bin",
    "PYTHONPATH": "/workspace",
    "LD_LIBRARY_PATH": "/usr/local/cuda/lib64",
    "NCCL_IB_HCA": "mlx5_0,mlx5_1",
    "NCCL_SOCKET_IFNAME": "^lo,docker",
    "MLENV_NNODES": "2",
    "MLENV_POD_INDEX": "0",
    "MLENV_POD_NAME": "ml-dev-env-0",
    "CUDA_VISIBLE_DEVICES": "0,1",
    "CUDA_HOME": "/usr/local/cuda",
    "DS_ACCELERATOR": "cpu",
    "TORCH_EXTENSIONS_DIR": "/tmp/ext",
    "HOME": "/home/x",
    "HOSTNAME": "ml-dev-env-0",
    "KUBERNETES_SERVICE_HOST": "10.0.0.1",
}


def test_select_forwards_prefixes_and_drops_per_pod_values() -> None:
    got = dsenv.select(ENV, per_pod_hca=False)
    assert set(got) == {
        "PATH",
        "PYTHONPATH",
        "LD_LIBRARY_PATH",
        "NCCL_IB_HCA",
        "NCCL_SOCKET_IFNAME",
        "MLENV_NNODES",
        "CUDA_HOME",
        "DS_ACCELERATOR",
        "TORCH_EXTENSIONS_DIR",
    }
    assert "NCCL_IB_HCA" not in dsenv.select(ENV, per_pod_hca=True)


def _through_deepspeed(text: str) -> dict[str, str]:
    """Feed the file to DeepSpeed's own exporter and evaluate the exports in a real shell."""
    from deepspeed.launcher.multinode_runner import PDSHRunner

    class _Args:
        user_args: list[str] = []
        user_script = "x.py"

    runner = PDSHRunner.__new__(PDSHRunner)
    runner.exports = {}
    for line in text.splitlines(keepends=True):  # exactly runner.py's loop
        key, val = line.split("=", maxsplit=1)
        runner.add_export(key, val)
    script = "".join(f"export {k}={v}; " for k, v in runner.exports.items())
    names = list(runner.exports)
    script += " ".join(f'printf "%s\\0" "${k}";' for k in names)
    out = subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=True).stdout
    return dict(zip(names, out.split("\0")[:-1], strict=True))


def test_values_with_spaces_and_symbols_survive_the_launcher() -> None:
    values = {
        "MLENV_NOTE": "two words, a=b; c|d & e",
        "NCCL_SOCKET_IFNAME": "^lo,docker0",
        "PATH": "/a b/bin:/usr/bin",
        "MLENV_EMPTY": "",
    }
    assert _through_deepspeed(dsenv.render(values)) == values


@pytest.mark.parametrize(
    "value,needle",
    [
        ("line1\nline2", "a newline"),
        ('say "hi"', "'\"'"),
        ("$HOME/x", "'$'"),
        ("a`id`", "'`'"),
        ("back\\slash", "'\\\\'"),
        (" padded", "whitespace"),
    ],
)
def test_unsafe_values_are_rejected_with_the_name(value: str, needle: str) -> None:
    with pytest.raises(InputError) as e:
        dsenv.render({"MLENV_X": value})
    assert "MLENV_X" in str(e.value) and needle in str(e.value)


def test_parse_reads_back_what_render_wrote() -> None:
    values = {"A": "1", "B": "x=y", "C": "with space"}
    assert dsenv.parse(dsenv.render(values)) == values


def test_env_file_is_shell_safe() -> None:
    values = {"A": "it's $HOME `x`", "B": "two\nlines"}
    out = subprocess.run(
        ["sh", "-c", dsenv.render_env_file(values) + 'printf "%s|%s" "$A" "$B"'],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out == "it's $HOME `x`|two\nlines"


def test_launch_file_precedence_init_then_launch_shell_then_local_file() -> None:
    init_vars = {"MLENV_A": "init", "NCCL_DEBUG": "WARN", "PATH": "/init/bin"}
    shell = {
        "NCCL_DEBUG": "INFO",
        "MLENV_B": "shell",
        "PATH": "/shell/bin",
        "HOME": "/h",
        "MLENV_POD_INDEX": "0",
    }
    text = dsenv.launch_file(
        init_vars, shell, per_pod_hca=False, user_file_text="NCCL_DEBUG=TRACE\n\nX=$HOME/y\n"
    )
    got = dsenv.parse(text)
    # The shell's NCCL_*/MLENV_* changes win over init's; a variable only init saw is kept;
    # ./.deepspeed_env lines come last (DeepSpeed reads that file after ~/.deepspeed_env).
    assert got["MLENV_A"] == "init" and got["MLENV_B"] == "shell" and got["PATH"] == "/shell/bin"
    assert got["X"] == "$HOME/y" and "HOME" not in got and "MLENV_POD_INDEX" not in got
    lines = text.splitlines()
    assert lines.index("NCCL_DEBUG=INFO") < lines.index("NCCL_DEBUG=TRACE") and "" not in lines


def test_launch_file_never_forwards_a_per_pod_hca() -> None:
    text = dsenv.launch_file({"NCCL_IB_HCA": "mlx5_0"}, {"NCCL_IB_HCA": "mlx5_1"}, per_pod_hca=True)
    assert "NCCL_IB_HCA" not in dsenv.parse(text)
    assert (
        dsenv.parse(dsenv.launch_file({}, {"NCCL_IB_HCA": "mlx5_1"}, per_pod_hca=False))[
            "NCCL_IB_HCA"
        ]
        == "mlx5_1"
    )


def test_launch_file_rejects_what_cannot_travel() -> None:
    with pytest.raises(InputError, match="NCCL_DEBUG contains '\\$'"):
        dsenv.launch_file({}, {"NCCL_DEBUG": "$X"}, per_pod_hca=False)
    with pytest.raises(InputError, match=r"\./\.deepspeed_env:2: expected KEY=value"):
        dsenv.launch_file({}, {}, per_pod_hca=False, user_file_text="A=1\nnonsense\n")
