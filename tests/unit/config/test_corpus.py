"""Every broken config in tests/data/bad-configs/ yields exactly the lines of its .expected file."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from mlenv.config import check_file, load
from mlenv.errors import ConfigError

CORPUS = Path(__file__).resolve().parents[2] / "data" / "bad-configs"
CASES = sorted(CORPUS.glob("*.yaml"))


def test_corpus_is_large_enough() -> None:
    assert len(CASES) >= 30
    assert all(c.with_suffix(".expected").is_file() for c in CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.stem for c in CASES])
def test_bad_config_exact_messages(case: Path) -> None:
    expected = case.with_suffix(".expected").read_text().splitlines()
    cluster, diags = check_file(case)
    assert cluster is None
    got = [dataclasses.replace(d, file=case.name).format() for d in diags]
    assert got == expected
    # The raising API carries the same diagnostics, with the real path in each line.
    with pytest.raises(ConfigError) as info:
        load(case)
    assert [d.format() for d in info.value.diagnostics] == [d.format() for d in diags]
    assert all(line.startswith(f"{case}:") for line in str(info.value).splitlines())
