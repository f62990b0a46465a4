"""docs/acceptance.md's options table is the one the checks' declarations generate."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlenv.acceptance.core import optionsdoc

DOC = Path(__file__).resolve().parents[3] / "docs" / "acceptance.md"


def test_the_committed_options_table_is_fresh() -> None:
    committed = optionsdoc.committed_block(DOC.read_text(encoding="utf-8"))
    assert committed == optionsdoc.render(), (
        "regenerate: python -m mlenv.acceptance.core.optionsdoc --write docs/acceptance.md"
    )


def test_every_declared_option_is_in_the_table() -> None:
    from mlenv.acceptance.core.base import registry

    block = optionsdoc.render()
    for name, cls in registry().items():
        if cls.__module__.startswith("mlenv.acceptance.checks"):
            assert f"`{name}`" in block
            for spec in cls.Options.specs():
                assert f"| `{spec.name}` | {spec.type.__name__} |" in block


def test_write_replaces_only_the_block(tmp_path: Path) -> None:
    p = tmp_path / "doc.md"
    p.write_text(f"# before\n{optionsdoc.BEGIN}\nold\n{optionsdoc.END}\nafter\n", encoding="utf-8")
    assert optionsdoc.main(["--write", str(p)]) == 0
    text = p.read_text(encoding="utf-8")
    assert (
        text.startswith("# before\n")
        and text.endswith(f"{optionsdoc.END}\nafter\n")
        and "\nold\n" not in text
    )
    with pytest.raises(ValueError, match="markers are missing"):
        optionsdoc.replace_block("no markers", "x")
