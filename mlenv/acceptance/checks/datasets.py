"""Datasets the training check (and ``workspace/train_multi_node.py``) train on.

* ``synthetic`` (default): deterministic and *learnable*, so a falling loss proves the
  whole stack trains. Images: each class has a fixed smooth random pattern and a
  sample is its class pattern plus per-sample noise. Tokens (for the GPT): sequences
  that follow a fixed random successor table most of the time, so next-token loss
  can fall far below ``ln(vocab)``. Samples are generated from their index, so a
  large virtual size costs no memory.
* ``fashionmnist``: the idx-ubyte files (``train-images-idx3-ubyte[.gz]`` …) read from
  a local directory (also its ``FashionMNIST/raw`` sub-folder, torchvision's layout).
* ``cifar10``: the python pickle batches (``data_batch_1`` … ``data_batch_5``,
  ``test_batch``) read from a local directory or its ``cifar-10-batches-py`` folder.
  They are unpickled with an allow-list (numpy arrays only), never ``pickle.load``
  on arbitrary classes.

Missing or malformed files raise :class:`~mlenv.errors.InputError` naming the file and
what was expected. numpy and torch are imported inside the functions.

Every dataset is map-style (``len``, ``ds[i] -> (x, y)``, usable by a torch
``DataLoader`` or ``deepspeed.initialize(training_data=…)``) and has ``num_classes``
(the vocabulary size for tokens), ``sample_shape`` and ``get_batch(indices)``.
"""

from __future__ import annotations

import gzip
import importlib
import io
import pickle
import struct
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlenv.errors import InputError

if TYPE_CHECKING:
    import numpy as np
    import torch

DATASETS = ("synthetic", "fashionmnist", "cifar10")
_ALIASES = {
    "fashion_mnist": "fashionmnist",
    "fashion-mnist": "fashionmnist",
    "cifar-10": "cifar10",
    "cifar_10": "cifar10",
}

# Per-channel statistics of the training sets (the usual published values), so the
# real datasets reach the model roughly zero-mean and unit-variance.
_FASHION_MEAN: tuple[float, ...] = (0.2860,)
_FASHION_STD: tuple[float, ...] = (0.3530,)
_CIFAR_MEAN: tuple[float, ...] = (0.4914, 0.4822, 0.4465)
_CIFAR_STD: tuple[float, ...] = (0.2470, 0.2435, 0.2616)

# idx type codes (http://yann.lecun.com/exdb/mnist/): only unsigned bytes are used.
_IDX_UBYTE = 0x08


def canonical_name(name: str) -> str:
    """``fashion_mnist`` → ``fashionmnist`` etc.; InputError for an unknown dataset."""
    key = _ALIASES.get(name.lower(), name.lower())
    if key not in DATASETS:
        raise InputError(f"unknown dataset {name!r} (expected one of: {', '.join(DATASETS)})")
    return key


class TensorDataset:
    """Samples held in two tensors: ``x`` (N, …) float and ``y`` (N,) int64."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, num_classes: int, name: str) -> None:
        if x.shape[0] != y.shape[0]:
            raise ValueError(f"{name}: {x.shape[0]} samples but {y.shape[0]} labels")
        self.x, self.y, self.num_classes, self.name = x, y, num_classes, name

    @property
    def sample_shape(self) -> tuple[int, ...]:
        """One sample's shape, e.g. ``(1, 28, 28)``."""
        return tuple(int(d) for d in self.x.shape[1:])

    def __len__(self) -> int:
        return int(self.x.shape[0])

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[i], self.y[i]

    def get_batch(self, indices: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """The samples at ``indices`` stacked into one batch."""
        import torch

        idx = torch.as_tensor(indices, dtype=torch.long)
        return self.x[idx], self.y[idx]


class SyntheticImages:
    """Class-pattern images: sample i = pattern[label(i)] + noise(i), all from ``seed``."""

    def __init__(
        self,
        size: int,
        num_classes: int = 10,
        shape: tuple[int, int, int] = (3, 32, 32),
        noise: float = 0.5,
        seed: int = 0,
    ) -> None:
        import torch
        from torch.nn import functional as F

        if size < 1 or num_classes < 2 or min(shape) < 1:
            raise InputError(
                f"synthetic images: need size >= 1, num_classes >= 2 and a positive shape, "
                f"got size={size}, num_classes={num_classes}, shape={shape}"
            )
        self.size, self.num_classes, self.noise, self.seed = size, num_classes, noise, seed
        self.name = "synthetic"
        g = torch.Generator().manual_seed(seed)
        c, h, w = shape
        # Smooth patterns (a 4×4 random grid upsampled) survive strided convolutions and
        # pooling, so any of the ResNet stems can tell the classes apart.
        coarse = torch.randn(num_classes, c, 4, 4, generator=g)
        self.patterns = F.interpolate(coarse, size=(h, w), mode="bilinear", align_corners=False)
        self.patterns /= self.patterns.std(dim=(1, 2, 3), keepdim=True)
        self._shape = shape

    @property
    def sample_shape(self) -> tuple[int, ...]:
        """``(C, H, W)``."""
        return self._shape

    def __len__(self) -> int:
        return self.size

    def label(self, i: int) -> int:
        """Label of sample ``i`` (deterministic, balanced over the classes)."""
        return (
            i * 7919 + self.seed
        ) % self.num_classes  # a prime stride mixes the classes in a batch

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        import torch

        if not 0 <= i < self.size:
            raise IndexError(i)
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + i)
        y = self.label(i)
        x = self.patterns[y] + self.noise * torch.randn(self._shape, generator=g)
        return x, torch.tensor(y, dtype=torch.long)

    def get_batch(self, indices: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """The samples at ``indices`` stacked into one batch."""
        import torch

        xs, ys = zip(*(self[i] for i in indices), strict=True)
        return torch.stack(xs), torch.stack(ys)


class SyntheticTokens:
    """Token sequences for next-token prediction: ``x = seq[:-1]``, ``y = seq[1:]``.

    Each next token is ``successor[current]`` (a fixed random permutation) with
    probability ``1 - noise``, else uniform: the best achievable loss is far below
    ``ln(vocab_size)``, so training visibly lowers it.
    """

    def __init__(
        self, size: int, vocab_size: int = 256, seq_len: int = 64, noise: float = 0.1, seed: int = 0
    ) -> None:
        import torch

        if size < 1 or vocab_size < 2 or seq_len < 1:
            raise InputError(
                f"synthetic tokens: need size >= 1, vocab_size >= 2, seq_len >= 1, "
                f"got {size}, {vocab_size}, {seq_len}"
            )
        self.size, self.num_classes, self.seq_len, self.noise, self.seed = (
            size,
            vocab_size,
            seq_len,
            noise,
            seed,
        )
        self.name = "synthetic"
        self.successor = torch.randperm(vocab_size, generator=torch.Generator().manual_seed(seed))

    @property
    def sample_shape(self) -> tuple[int, ...]:
        """``(seq_len,)``."""
        return (self.seq_len,)

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        import torch

        if not 0 <= i < self.size:
            raise IndexError(i)
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + i)
        n = self.seq_len + 1
        jump = torch.rand(n, generator=g) < self.noise
        rand = torch.randint(self.num_classes, (n,), generator=g)
        seq = torch.empty(n, dtype=torch.long)
        seq[0] = rand[0]
        for t in range(1, n):
            seq[t] = rand[t] if jump[t] else self.successor[seq[t - 1]]
        return seq[:-1], seq[1:]

    def get_batch(self, indices: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """The samples at ``indices`` stacked into one batch."""
        import torch

        xs, ys = zip(*(self[i] for i in indices), strict=True)
        return torch.stack(xs), torch.stack(ys)


Dataset = TensorDataset | SyntheticImages | SyntheticTokens


# --------------------------------------------------------------------------- readers


def _read_maybe_gz(path: Path) -> bytes:
    try:
        raw = path.read_bytes()
        if raw[:2] == b"\x1f\x8b":  # gzip magic, whatever the file is called
            return gzip.decompress(raw)
        return raw
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror or e}") from None
    except (EOFError, gzip.BadGzipFile) as e:
        raise InputError(f"{path}: corrupt gzip data: {e}") from None


def read_idx(path: str | Path) -> np.ndarray:
    """Read one idx-ubyte file (optionally gzip-compressed) into a uint8 array.

    Format: 2 zero bytes, type code (0x08 = unsigned byte), number of dimensions, then
    one big-endian uint32 per dimension, then the data. Raises InputError naming the
    file when anything does not match.
    """
    import numpy as np

    p = Path(path)
    data = _read_maybe_gz(p)
    if len(data) < 4:
        raise InputError(f"{p}: not an idx file: {len(data)} bytes, expected a 4-byte header")
    zero, code, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0:
        raise InputError(f"{p}: not an idx file: magic starts with {data[:2].hex()}, expected 0000")
    if code != _IDX_UBYTE:
        raise InputError(f"{p}: idx type code 0x{code:02x}, expected 0x08 (unsigned byte)")
    if ndim < 1:
        raise InputError(f"{p}: idx header declares {ndim} dimensions, expected at least 1")
    head = 4 + 4 * ndim
    if len(data) < head:
        raise InputError(f"{p}: truncated idx header: {len(data)} bytes, expected {head}")
    dims = struct.unpack(f">{ndim}I", data[4:head])
    expected = 1
    for d in dims:
        expected *= d
    if len(data) - head != expected:
        raise InputError(
            f"{p}: idx dimensions {list(dims)} need {expected} data bytes, found {len(data) - head}"
        )
    return np.frombuffer(data, dtype=np.uint8, offset=head).reshape(dims)


def _find(root: Path, names: list[str], what: str) -> Path:
    for name in names:
        if (root / name).is_file():
            return root / name
    raise InputError(f"{root}: {what} not found (looked for {', '.join(names)})")


def load_fashionmnist(root: str | Path, split: str = "train") -> tuple[np.ndarray, np.ndarray]:
    """FashionMNIST ``split`` (``train`` | ``test``) from ``root``: uint8 images (N, 28, 28), labels (N,)."""
    base = _dataset_dir(
        root,
        "FashionMNIST",
        ["FashionMNIST/raw", "fashion-mnist", "raw"],
        ["train-images-idx3-ubyte", "t10k-images-idx3-ubyte"],
    )
    prefix = {"train": "train", "test": "t10k"}.get(split)
    if prefix is None:
        raise InputError(f"fashionmnist: unknown split {split!r} (expected train or test)")
    img_path = _find(
        base, [f"{prefix}-images-idx3-ubyte", f"{prefix}-images-idx3-ubyte.gz"], "images file"
    )
    lbl_path = _find(
        base, [f"{prefix}-labels-idx1-ubyte", f"{prefix}-labels-idx1-ubyte.gz"], "labels file"
    )
    images, labels = read_idx(img_path), read_idx(lbl_path)
    if images.ndim != 3:
        raise InputError(
            f"{img_path}: images must have 3 dimensions (N, rows, cols), found {images.ndim}"
        )
    if labels.ndim != 1:
        raise InputError(f"{lbl_path}: labels must have 1 dimension (N,), found {labels.ndim}")
    if images.shape[0] != labels.shape[0]:
        raise InputError(
            f"{img_path}: {images.shape[0]} images but {lbl_path.name} has {labels.shape[0]} labels"
        )
    if labels.size and int(labels.max()) > 9:
        raise InputError(f"{lbl_path}: label {int(labels.max())} out of range, expected 0..9")
    return images, labels


class _NumpyOnlyUnpickler(pickle.Unpickler):
    """Unpickle only what the CIFAR batches contain: dicts, lists, bytes and ndarrays."""

    _ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("numpy.core.multiarray", "scalar"),
        ("numpy._core.multiarray", "scalar"),
        # Protocol-2 pickles written by Python 3 carry bytes as _codecs.encode(str, "latin1").
        ("_codecs", "encode"),
    }

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in self._ALLOWED:
            raise pickle.UnpicklingError(
                f"refusing to load {module}.{name}: a CIFAR-10 batch holds only arrays"
            )
        if module.startswith("numpy.core"):  # numpy 2 moved numpy.core to numpy._core
            module = module.replace("numpy.core", "numpy._core", 1)
        return getattr(importlib.import_module(module), name)


def _load_cifar_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    import numpy as np

    try:
        raw = path.read_bytes()
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror or e}") from None
    try:
        # The official files were pickled by Python 2: byte-string keys.
        doc = _NumpyOnlyUnpickler(io.BytesIO(raw), encoding="bytes").load()
    except Exception as e:  # pickle raises many types on garbage; all mean "malformed"
        raise InputError(f"{path}: not a CIFAR-10 python batch: {type(e).__name__}: {e}") from None
    if not isinstance(doc, dict):
        raise InputError(
            f"{path}: expected a dict with b'data' and b'labels', got {type(doc).__name__}"
        )
    doc = {k.decode() if isinstance(k, bytes) else k: v for k, v in doc.items()}
    if "data" not in doc or "labels" not in doc:
        raise InputError(
            f"{path}: missing key(s) {sorted({'data', 'labels'} - set(doc))} "
            f"(expected b'data' (N×3072 uint8) and b'labels')"
        )
    data = np.asarray(doc["data"])
    labels = np.asarray(doc["labels"])
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3 * 32 * 32:
        raise InputError(
            f"{path}: data is {data.dtype} {list(data.shape)}, expected uint8 [N, 3072]"
        )
    if labels.ndim != 1 or labels.shape[0] != data.shape[0]:
        raise InputError(
            f"{path}: {labels.shape[0] if labels.ndim else 0} labels for {data.shape[0]} images"
        )
    if labels.size and (int(labels.min()) < 0 or int(labels.max()) > 9):
        raise InputError(
            f"{path}: labels out of range {int(labels.min())}..{int(labels.max())}, expected 0..9"
        )
    return data.reshape(-1, 3, 32, 32), labels.astype(np.int64)


def load_cifar10(root: str | Path, split: str = "train") -> tuple[np.ndarray, np.ndarray]:
    """CIFAR-10 ``split`` from ``root``: uint8 images (N, 3, 32, 32), labels (N,).

    ``train`` reads every ``data_batch_<k>`` present (k = 1..5, at least one);
    ``test`` reads ``test_batch``.
    """
    import numpy as np

    base = _dataset_dir(root, "CIFAR-10", ["cifar-10-batches-py"], ["data_batch_1", "test_batch"])
    if split == "train":
        paths = [
            base / f"data_batch_{k}" for k in range(1, 6) if (base / f"data_batch_{k}").is_file()
        ]
        if not paths:
            raise InputError(f"{base}: no CIFAR-10 training batches (data_batch_1 … data_batch_5)")
    elif split == "test":
        paths = [_find(base, ["test_batch"], "CIFAR-10 test batch")]
    else:
        raise InputError(f"cifar10: unknown split {split!r} (expected train or test)")
    parts = [_load_cifar_batch(p) for p in paths]
    return np.concatenate([d for d, _ in parts]), np.concatenate([lb for _, lb in parts])


def _dataset_dir(root: str | Path, what: str, subdirs: list[str], markers: list[str]) -> Path:
    if not str(root):
        raise InputError(f"{what}: no data directory given (set the training option data_dir)")
    base = Path(root)
    if not base.is_dir():
        raise InputError(f"{base}: {what} data directory does not exist")
    for cand in [base, *(base / s for s in subdirs)]:
        for m in markers:
            if (cand / m).is_file() or (cand / f"{m}.gz").is_file():
                return cand
    return base  # the per-file lookup then names exactly what is missing


# --------------------------------------------------------------------------- builder


def _to_tensor_dataset(
    images: np.ndarray,
    labels: np.ndarray,
    mean: tuple[float, ...],
    std: tuple[float, ...],
    image_size: int | None,
    name: str,
) -> TensorDataset:
    import torch
    from torch.nn import functional as F

    x = torch.from_numpy(images.copy()).float().div_(255.0)
    if x.ndim == 3:
        x = x.unsqueeze(1)  # (N, H, W) -> (N, 1, H, W)
    m = torch.tensor(mean).view(1, -1, 1, 1)
    s = torch.tensor(std).view(1, -1, 1, 1)
    x = (x - m) / s
    if image_size and image_size != x.shape[-1]:
        x = F.interpolate(x, size=(image_size, image_size), mode="bilinear", align_corners=False)
    return TensorDataset(x, torch.from_numpy(labels.astype("int64")), 10, name)


def build_dataset(
    name: str,
    *,
    model: str = "resnet18",
    root: str | Path = "",
    size: int | None = None,
    split: str = "train",
    image_size: int | None = None,
    num_classes: int = 10,
    seq_len: int = 64,
    vocab_size: int = 256,
    seed: int = 0,
) -> Dataset:
    """Build dataset ``name`` (``synthetic`` | ``fashionmnist`` | ``cifar10``) for ``model``.

    ``synthetic`` gives images (3 × ``image_size`` px, default 32, ``num_classes``
    classes) for a ResNet and token sequences (``seq_len``, ``vocab_size``) for the
    GPT; ``size`` is its number of samples (default 4096). The real datasets read
    ``split`` from ``root`` (only images, so only for the ResNets); ``size`` then keeps
    the first ``size`` samples and ``image_size`` resizes.

    Raises InputError for an unknown name, a dataset that does not fit the model, or
    missing/malformed files.
    """
    from mlenv.acceptance.checks.models import MODELS, is_image_model

    key = canonical_name(name)
    if model not in MODELS:
        raise InputError(f"unknown model {model!r} (expected one of: {', '.join(MODELS)})")
    if size is not None and size < 1:
        raise InputError(f"dataset {key}: size must be >= 1, got {size}")
    if key == "synthetic":
        n = size or 4096
        if is_image_model(model):
            px = image_size or 32
            return SyntheticImages(n, num_classes, (3, px, px), seed=seed)
        return SyntheticTokens(n, vocab_size, seq_len, seed=seed)
    if not is_image_model(model):
        raise InputError(
            f"dataset {key} holds images; model {model} needs token sequences "
            f"(use dataset synthetic)"
        )
    if key == "fashionmnist":
        images, labels = load_fashionmnist(root, split)
        mean, std = _FASHION_MEAN, _FASHION_STD
    else:
        images, labels = load_cifar10(root, split)
        mean, std = _CIFAR_MEAN, _CIFAR_STD
    if len(labels) == 0:
        raise InputError(f"{root}: {key} {split} split holds no samples")
    if size is not None:
        images, labels = images[:size], labels[:size]
    return _to_tensor_dataset(images, labels, mean, std, image_size, key)
