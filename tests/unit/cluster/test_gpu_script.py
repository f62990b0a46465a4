"""gpu-info's one exec per pod: the script run by a real ``sh`` with stand-in commands,
and its sections read back exactly, whatever the commands print."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from mlenv.cluster.devloop import GPU_COMMANDS, GPU_SCRIPT, split_sections


def _tool(folder: Path, name: str, body: str) -> None:
    p = folder / name
    p.write_text("#!/bin/sh\n" + body + "\n")
    p.chmod(0o755)


def _run(folder: Path, mark: str) -> str:
    env = {**os.environ, "PATH": str(folder)}  # nothing of this machine's
    res = subprocess.run(
        ["/bin/sh", "-c", GPU_SCRIPT, "sh", mark],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=30,
    )
    assert res.stderr == ""
    return res.stdout


def test_each_command_s_output_and_status_come_back_in_order(tmp_path) -> None:
    # nvidia-smi: the query prints two rows; topo prints no final newline and a line that
    # looks like a section's end with another word; ibstat is not installed (127)
    _tool(
        tmp_path,
        "nvidia-smi",
        'if [ "$1" = topo ]; then printf "GPU0\\t X \\nmlenv-0000 0"; exit 0; fi\n'
        'echo "0, NVIDIA H100, 1, 81559, 0"; echo "1, NVIDIA H100, 2, 81559, 0"; '
        'echo "a warning" >&2; exit 0',
    )
    mark = "mlenv-0123456789abcdef"
    outs = split_sections(_run(tmp_path, mark), mark, len(GPU_COMMANDS))
    assert outs is not None
    query, topo, ibstat = outs
    assert query.returncode == 0
    assert query.output == "0, NVIDIA H100, 1, 81559, 0\n1, NVIDIA H100, 2, 81559, 0\na warning\n"
    assert (topo.returncode, topo.output) == (0, "GPU0\t X \nmlenv-0000 0")
    assert ibstat.returncode == 127 and "ibstat" in ibstat.output


def test_a_failing_command_keeps_its_status_and_the_next_still_runs(tmp_path) -> None:
    _tool(tmp_path, "nvidia-smi", 'echo "NVIDIA-SMI has failed" >&2; exit 9')
    _tool(tmp_path, "ibstat", "echo \"CA 'mlx5_0'\"")
    mark = "mlenv-feedfacefeedface"
    outs = split_sections(_run(tmp_path, mark), mark, len(GPU_COMMANDS))
    assert outs is not None
    assert [o.returncode for o in outs] == [9, 9, 0]
    assert outs[0].output == "NVIDIA-SMI has failed\n"
    assert outs[2].output == "CA 'mlx5_0'\n"


def test_output_without_every_section_is_not_read_as_sections() -> None:
    # the exec ended early (no sh, a dropped stream): no partial table is made up
    assert split_sections("0, H100, 1, 2, 3\nm 0\n", "m", 3) is None
    assert split_sections("", "m", 3) is None
