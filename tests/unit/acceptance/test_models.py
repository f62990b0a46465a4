"""The package's own ResNets and GPT: published parameter counts, shapes, a training step."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

torch = pytest.importorskip("torch")

from mlenv.acceptance.checks.models import build_model, count_parameters  # noqa: E402
from mlenv.errors import InputError  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def _one_thread() -> Iterator[None]:
    """One intra-op thread: make unit's workers already fill the cores, and torch's
    threads, contending with them, took a ResNet-50 forward from 0.3 s of CPU to 1.4 s
    (shapes and counts are the subject here, not speed)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize(
    ("name", "published"), [("resnet18", 11_689_512), ("resnet50", 25_557_032)]
)
def test_resnet_parameter_count_matches_torchvision(name: str, published: int) -> None:
    # torchvision's figures for resnet18/resnet50 at 1000 classes (its model docs list
    # 11.7M and 25.6M); an exact match shows the layer layout is the real one.
    assert count_parameters(build_model(name, num_classes=1000)) == published


@pytest.mark.parametrize("name", ["resnet18", "resnet50"])
@pytest.mark.parametrize(
    ("shape", "classes"), [((3, 32, 32), 10), ((1, 28, 28), 10), ((3, 64, 64), 7)]
)
def test_resnet_logits_shape(name: str, shape: tuple[int, int, int], classes: int) -> None:
    model = build_model(name, num_classes=classes, in_shape=shape).eval()
    with torch.no_grad():
        out = model(torch.randn(2, *shape))
    assert out.shape == (2, classes)
    assert torch.isfinite(out).all()


def test_small_images_get_the_cifar_stem_and_large_the_imagenet_stem() -> None:
    small = build_model("resnet18", 10, (3, 32, 32))
    large = build_model("resnet18", 10, (3, 224, 224))
    assert small.stem[0].kernel_size == (3, 3) and small.stem[0].stride == (1, 1)  # type: ignore[index,union-attr]
    assert large.stem[0].kernel_size == (7, 7) and large.stem[0].stride == (2, 2)  # type: ignore[index,union-attr]


def test_gpt_forward_backward_and_weight_tying() -> None:
    torch.manual_seed(0)
    model = build_model("gpt", num_classes=100, in_shape=(16,), d_model=32, n_layer=2, n_head=4)
    idx = torch.randint(100, (3, 16))
    logits = model(idx)
    assert logits.shape == (3, 16, 100)
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 100), idx.reshape(-1))
    loss.backward()
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert model.head.weight is model.tok.weight  # type: ignore[union-attr]
    # Tied weights are counted once: embedding 100×32 + positions 16×32 + 2 blocks + final LN.
    block = (32 * 96 + 96) + (32 * 32 + 32) + 2 * (2 * 32) + (32 * 128 + 128) + (128 * 32 + 32)
    assert count_parameters(model) == 100 * 32 + 16 * 32 + 2 * block + 2 * 32


def test_gpt_is_causal() -> None:
    torch.manual_seed(0)
    model = build_model(
        "gpt", num_classes=50, in_shape=(8,), d_model=16, n_layer=1, n_head=2
    ).eval()
    a = torch.randint(50, (1, 8))
    b = a.clone()
    b[0, 5:] = (b[0, 5:] + 1) % 50  # change only the future of position 4
    with torch.no_grad():
        assert torch.allclose(model(a)[0, :5], model(b)[0, :5], atol=1e-6)
        assert not torch.allclose(model(a)[0, 5:], model(b)[0, 5:])


def test_bad_model_arguments_are_input_errors() -> None:
    with pytest.raises(InputError, match="unknown model 'vgg'"):
        build_model("vgg", 10)
    with pytest.raises(InputError, match=r"in_shape must be \(channels, height, width\)"):
        build_model("resnet18", 10, (32, 32))
    with pytest.raises(InputError, match="not divisible"):
        build_model("gpt", 10, (8,), d_model=30, n_head=4)
    with pytest.raises(InputError, match="num_classes must be >= 1"):
        build_model("resnet50", 0)
