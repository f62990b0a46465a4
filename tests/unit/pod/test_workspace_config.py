"""workspace/train_multi_node.py: ds_config.json made concrete per machine (no torch needed)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[3]


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "train_multi_node", ROOT / "workspace" / "train_multi_node.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


CONFIG = json.loads((ROOT / "workspace" / "ds_config.json").read_text())


def test_shipped_config_is_zero2_with_bf16_auto() -> None:
    assert CONFIG["zero_optimization"]["stage"] == 2 and CONFIG["bf16"]["enabled"] == "auto"


def test_cpu_ranks_train_fp32_with_torch_adamw() -> None:
    cfg = _script().resolve_config(CONFIG, cuda=False, bf16_ok=False, micro_batch=4)
    assert cfg["bf16"]["enabled"] is False
    assert cfg["optimizer"]["params"]["torch_adam"] is True
    assert cfg["train_micro_batch_size_per_gpu"] == 4
    assert CONFIG["bf16"]["enabled"] == "auto"  # the loaded file is not changed in place


def test_auto_bf16_follows_the_gpu() -> None:
    mod = _script()
    on = mod.resolve_config(CONFIG, cuda=True, bf16_ok=True, micro_batch=None)
    off = mod.resolve_config(CONFIG, cuda=True, bf16_ok=False, micro_batch=None)
    assert on["bf16"]["enabled"] is True and off["bf16"]["enabled"] is False
    assert "torch_adam" not in on["optimizer"]["params"]  # GPUs keep DeepSpeed's fused AdamW
    assert on["train_micro_batch_size_per_gpu"] == CONFIG["train_micro_batch_size_per_gpu"]


def test_an_explicit_bf16_setting_is_kept() -> None:
    cfg = _script().resolve_config(
        {**CONFIG, "bf16": {"enabled": False}}, cuda=True, bf16_ok=True, micro_batch=None
    )
    assert cfg["bf16"]["enabled"] is False


def test_epochs_is_upstreams_length_of_a_run() -> None:
    """Upstream's `train_multi_node.py --epochs N` was refused ("unrecognized arguments")."""
    import pytest

    mod = _script()
    args = mod.parse_args(["--epochs", "3"])
    assert (args.epochs, args.steps) == (3, None)
    assert mod.total_steps(args.steps, args.epochs, batches_per_epoch=25) == 75
    assert mod.total_steps(None, None, batches_per_epoch=25) == 100  # the default: 100 steps
    assert mod.total_steps(40, None, batches_per_epoch=25) == 40
    for bad in (["--epochs", "2", "--steps", "5"], ["--epochs", "0"]):
        with pytest.raises(SystemExit) as info:
            mod.parse_args(bad)
        assert info.value.code == 2
