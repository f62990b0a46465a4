"""The tar files one kubectl sync streams: each set of names packed once, bounded."""

from __future__ import annotations

import os
import tarfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from mlenv.cluster import packs as packsmod
from mlenv.cluster.oc import write_pack
from mlenv.cluster.packs import TreePacks


def _tree(root: Path, n: int) -> list[str]:
    names = [f"f{i}.txt" for i in range(n)]
    for name in names:
        (root / name).write_text(name)
    return names


def test_each_set_is_packed_once_however_many_pods_ask_at_once(tmp_path: Path) -> None:
    """Sixteen pods lacking the same files wait for one pack of them (the first to ask
    writes it, slowly here), not sixteen."""
    names = _tree(tmp_path, 3)
    written: list[tuple[str, ...]] = []

    def write(local_dir: str, chosen: Sequence[str], path: str) -> None:
        written.append(tuple(chosen))
        time.sleep(0.2)
        with tarfile.open(path, "w") as tar:
            for rel in chosen:
                tar.add(os.path.join(local_dir, rel), arcname=f"./{rel}")

    packs = TreePacks(str(tmp_path), names, write)
    got: list[tuple[str, tuple[str, ...]]] = []
    threads = [
        threading.Thread(target=lambda: got.append(packs.archive(["f1.txt", "f0.txt"])))
        for _ in range(16)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert written == [("f0.txt", "f1.txt")]
    assert len({path for path, _ in got}) == 1 and {k for _, k in got} == {("f0.txt", "f1.txt")}
    with tarfile.open(got[0][0]) as tar:
        assert tar.getnames() == ["./f0.txt", "./f1.txt"]
    packs.close()
    assert not os.path.exists(got[0][0])


def test_past_the_bound_a_pod_gets_the_whole_tree(tmp_path: Path) -> None:
    """Pods that each lack something else would make a pack each: past MAX_PACKS partial
    sets the whole tree goes instead (tar overwrites what the pod holds with the same
    bytes), so a sync's temporary files stay bounded; the whole tree's pack is shared."""
    names = _tree(tmp_path, packsmod.MAX_PACKS + 3)
    with TreePacks(str(tmp_path), names, write_pack) as packs:
        firsts = [packs.archive([n]) for n in names[: packsmod.MAX_PACKS]]
        assert [k for _, k in firsts] == [(n,) for n in names[: packsmod.MAX_PACKS]]
        late, sent = packs.archive([names[-1]])
        assert sent == tuple(sorted(names))
        with tarfile.open(late) as tar:
            assert sorted(tar.getnames()) == sorted(f"./{n}" for n in names)
        # an earlier set is still its own pack; the whole tree is packed once
        assert packs.archive([names[0]]) == firsts[0]
        assert packs.archive(names)[0] == late == packs.archive([names[-2]])[0]
        made = [path for path, _ in firsts] + [late]
    assert [p for p in made if os.path.exists(p)] == []
