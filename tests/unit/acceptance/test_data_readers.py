"""Datasets: synthetic data is deterministic and learnable; the FashionMNIST and CIFAR-10
readers load small files written here in the real formats and reject malformed ones."""

from __future__ import annotations

import gzip
import pickle
import struct
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")

from mlenv.acceptance.checks.datasets import (  # noqa: E402
    SyntheticImages,
    SyntheticTokens,
    build_dataset,
    load_cifar10,
    load_fashionmnist,
    read_idx,
)
from mlenv.errors import InputError  # noqa: E402


def write_idx(path: Path, arr: Any, *, gz: bool = False, code: int = 0x08) -> Path:
    """An idx-ubyte file exactly as the MNIST/FashionMNIST distribution writes it."""
    head = struct.pack(">HBB", 0, code, arr.ndim) + struct.pack(f">{arr.ndim}I", *arr.shape)
    blob = head + arr.astype(np.uint8).tobytes()
    path.write_bytes(gzip.compress(blob) if gz else blob)
    return path


def write_fashion(root: Path, n: int, prefix: str = "train", gz: bool = True) -> tuple[Any, Any]:
    rng = np.random.default_rng(1)
    images = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, n, dtype=np.uint8)
    ext = ".gz" if gz else ""
    write_idx(root / f"{prefix}-images-idx3-ubyte{ext}", images, gz=gz)
    write_idx(root / f"{prefix}-labels-idx1-ubyte{ext}", labels, gz=gz)
    return images, labels


def write_cifar_batch(path: Path, n: int, seed: int) -> tuple[Any, list[int]]:
    """A CIFAR-10 python batch: dict with byte keys, data uint8 [N, 3072], labels a list."""
    rng = np.random.default_rng(seed)
    data = rng.integers(0, 256, (n, 3072), dtype=np.uint8)
    labels = [int(v) for v in rng.integers(0, 10, n)]
    doc = {
        b"batch_label": b"training batch",
        b"labels": labels,
        b"data": data,
        b"filenames": [b"x.png"] * n,
    }
    path.write_bytes(pickle.dumps(doc, protocol=2))
    return data, labels


# ------------------------------------------------------------------ synthetic


def test_synthetic_images_are_deterministic_and_balanced() -> None:
    a, b = SyntheticImages(40, 10, (3, 8, 8), seed=3), SyntheticImages(40, 10, (3, 8, 8), seed=3)
    xa, ya = a.get_batch(list(range(40)))
    xb, yb = b.get_batch(list(range(40)))
    assert torch.equal(xa, xb) and torch.equal(ya, yb)
    assert sorted(torch.bincount(ya, minlength=10).tolist()) == [4] * 10
    assert not torch.equal(
        xa, SyntheticImages(40, 10, (3, 8, 8), seed=4).get_batch(list(range(40)))[0]
    )


def test_synthetic_images_are_learnable() -> None:
    # Nearest class pattern classifies far above chance (10%): the labels carry signal.
    ds = SyntheticImages(200, 10, (3, 16, 16), seed=0)
    x, y = ds.get_batch(list(range(200)))
    d = ((x.unsqueeze(1) - ds.patterns.unsqueeze(0)) ** 2).flatten(2).sum(-1)
    assert (d.argmin(1) == y).float().mean().item() > 0.9
    # And a linear model trained for a few steps lowers the loss a lot. Plain gradient
    # steps, as torch.optim.SGD (no momentum) takes them: the first optimizer a process
    # builds imports torch._dynamo, 1.6 s of CPU that says nothing about the data.
    torch.manual_seed(0)
    lin = torch.nn.Linear(3 * 16 * 16, 10)
    losses = []
    for _ in range(30):
        loss = torch.nn.functional.cross_entropy(lin(x.flatten(1)), y)
        lin.zero_grad()
        loss.backward()
        with torch.no_grad():
            for p in lin.parameters():
                p -= 0.05 * p.grad
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]


def test_synthetic_tokens_follow_the_successor_table() -> None:
    ds = SyntheticTokens(50, vocab_size=64, seq_len=32, noise=0.1, seed=0)
    x, y = ds.get_batch(list(range(50)))
    assert x.shape == y.shape == (50, 32)
    assert torch.equal(x[:, 1:], y[:, :-1])  # y is x shifted by one
    follows = (ds.successor[x] == y).float().mean().item()
    assert 0.85 < follows < 0.97  # ~90% by construction (plus chance hits of the jumps)


def test_build_dataset_picks_images_or_tokens_by_model() -> None:
    img = build_dataset("synthetic", model="resnet18", size=8, image_size=16)
    tok = build_dataset("synthetic", model="gpt", size=8, seq_len=12, vocab_size=30)
    assert img.sample_shape == (3, 16, 16) and img.num_classes == 10 and len(img) == 8
    assert tok.sample_shape == (12,) and tok.num_classes == 30


def test_build_dataset_rejects_bad_names() -> None:
    with pytest.raises(InputError, match="unknown dataset 'mnist'"):
        build_dataset("mnist")
    with pytest.raises(InputError, match="model gpt needs token sequences"):
        build_dataset("cifar10", model="gpt", root="/nonexistent")


# ------------------------------------------------------------------ FashionMNIST


@pytest.mark.parametrize("gz", [True, False])
def test_fashionmnist_reads_idx_files(tmp_path: Path, gz: bool) -> None:
    images, labels = write_fashion(tmp_path, 12, gz=gz)
    got_x, got_y = load_fashionmnist(tmp_path, "train")
    assert np.array_equal(got_x, images) and np.array_equal(got_y, labels)


def test_fashionmnist_torchvision_layout_and_dataset(tmp_path: Path) -> None:
    raw = tmp_path / "FashionMNIST" / "raw"
    raw.mkdir(parents=True)
    images, labels = write_fashion(raw, 6, prefix="t10k", gz=False)
    ds = build_dataset("fashion_mnist", root=tmp_path, split="test", size=5)
    assert len(ds) == 5 and ds.sample_shape == (1, 28, 28)
    x, y = ds.get_batch([0, 4])
    assert y.tolist() == [int(labels[0]), int(labels[4])]
    # Pixels are scaled and normalised with the FashionMNIST statistics.
    assert torch.allclose(x[0, 0], (torch.from_numpy(images[0]).float() / 255 - 0.2860) / 0.3530)
    resized = build_dataset("fashionmnist", root=tmp_path, split="test", image_size=16)
    assert resized.sample_shape == (1, 16, 16)


def test_fashionmnist_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="does not exist"):
        load_fashionmnist(tmp_path / "nope")
    with pytest.raises(InputError, match=r"images file not found .*train-images-idx3-ubyte"):
        load_fashionmnist(tmp_path)
    with pytest.raises(InputError, match="no data directory given"):
        load_fashionmnist("")
    write_fashion(tmp_path, 4, gz=False)
    lbl = tmp_path / "train-labels-idx1-ubyte"
    write_idx(lbl, np.arange(3, dtype=np.uint8))
    with pytest.raises(InputError, match="4 images but train-labels-idx1-ubyte has 3 labels"):
        load_fashionmnist(tmp_path)
    write_idx(lbl, np.array([0, 1, 2, 12], dtype=np.uint8))
    with pytest.raises(InputError, match=f"{lbl}: label 12 out of range"):
        load_fashionmnist(tmp_path)


def test_read_idx_rejects_malformed_files(tmp_path: Path) -> None:
    p = tmp_path / "f"
    p.write_bytes(b"\x00\x00")
    with pytest.raises(InputError, match=f"{p}: not an idx file"):
        read_idx(p)
    p.write_bytes(b"PK\x03\x04rest")
    with pytest.raises(InputError, match="magic starts with 504b"):
        read_idx(p)
    write_idx(p, np.zeros((2, 2), dtype=np.uint8), code=0x0D)
    with pytest.raises(InputError, match="type code 0x0d, expected 0x08"):
        read_idx(p)
    write_idx(p, np.zeros((2, 3), dtype=np.uint8))
    p.write_bytes(p.read_bytes()[:-1])
    with pytest.raises(InputError, match=r"dimensions \[2, 3\] need 6 data bytes, found 5"):
        read_idx(p)
    p.write_bytes(gzip.compress(b"\x00\x00\x08\x01\x00\x00\x00\x04abcd")[:-6])
    with pytest.raises(InputError, match="corrupt gzip data"):
        read_idx(p)


# ------------------------------------------------------------------ CIFAR-10


def test_cifar10_reads_python_batches(tmp_path: Path) -> None:
    base = tmp_path / "cifar-10-batches-py"
    base.mkdir()
    d1, l1 = write_cifar_batch(base / "data_batch_1", 5, 1)
    d2, l2 = write_cifar_batch(base / "data_batch_2", 3, 2)
    dt, lt = write_cifar_batch(base / "test_batch", 4, 3)
    x, y = load_cifar10(tmp_path, "train")
    assert x.shape == (8, 3, 32, 32)
    assert np.array_equal(x.reshape(8, -1), np.concatenate([d1, d2])) and y.tolist() == l1 + l2
    xt, yt = load_cifar10(base, "test")
    assert np.array_equal(xt.reshape(4, -1), dt) and yt.tolist() == lt
    ds = build_dataset("cifar10", root=tmp_path, image_size=16)
    assert ds.sample_shape == (3, 16, 16) and len(ds) == 8 and ds.num_classes == 10


def test_cifar10_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no CIFAR-10 training batches"):
        load_cifar10(tmp_path)
    bad = tmp_path / "data_batch_1"
    bad.write_bytes(b"not a pickle at all")
    with pytest.raises(InputError, match=f"{bad}: not a CIFAR-10 python batch"):
        load_cifar10(tmp_path)
    bad.write_bytes(pickle.dumps({b"data": np.zeros((2, 100), dtype=np.uint8), b"labels": [0, 1]}))
    with pytest.raises(InputError, match=r"data is uint8 \[2, 100\], expected uint8 \[N, 3072\]"):
        load_cifar10(tmp_path)
    bad.write_bytes(pickle.dumps({b"data": np.zeros((2, 3072), dtype=np.uint8)}))
    with pytest.raises(InputError, match=r"missing key\(s\) \['labels'\]"):
        load_cifar10(tmp_path)
    bad.write_bytes(
        pickle.dumps({b"data": np.zeros((2, 3072), dtype=np.uint8), b"labels": [0, 10]})
    )
    with pytest.raises(InputError, match="labels out of range 0..10"):
        load_cifar10(tmp_path)


def test_cifar10_refuses_pickled_code(tmp_path: Path) -> None:
    # A batch file that would run code when unpickled must be refused, not executed.
    marker = tmp_path / "executed"

    class Evil:
        def __reduce__(self) -> tuple[object, tuple[str, str]]:
            return (Path.write_text, (str(marker), "boom"))

    (tmp_path / "data_batch_1").write_bytes(pickle.dumps({b"data": Evil(), b"labels": []}))
    with pytest.raises(InputError, match="refusing to load pathlib"):
        load_cifar10(tmp_path)
    assert not marker.exists()
