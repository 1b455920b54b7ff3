import pytest
import torch

from flowerbed.models import MODELS, Classifier, build_model


@pytest.mark.parametrize(
    "name, shape",
    [
        ("mlp", (30,)),
        ("mlp", (1, 8, 8)),
        ("cnn", (1, 8, 8)),
        ("cnn", (3, 32, 32)),
        ("cnn", (1, 28, 28)),
        ("mlp-small", (30,)),
        ("logreg", (60,)),
        ("logreg", (1, 8, 8)),
        ("cnn-small", (1, 8, 8)),
        ("cnn-small", (3, 32, 32)),
        ("cnn-bn", (1, 8, 8)),
        ("cnn-bn", (3, 32, 32)),
        ("resnet18", (3, 32, 32)),
        ("resnet18", (1, 8, 8)),
    ],
)
def test_models_give_one_logit_per_class_and_split_features_from_head(name, shape):
    torch.manual_seed(0)
    model = build_model(name, shape, num_classes=7)
    assert isinstance(model, Classifier)
    x = torch.randn(4, *shape)
    logits = model(x)
    assert logits.shape == (4, 7)
    features = model.features(x)
    assert features.ndim == 2 and features.shape[0] == 4
    assert torch.allclose(model.head(features), logits, atol=1e-6)
    # the head is the last linear layer: its input width is the feature width
    assert model.head.in_features == features.shape[1]


def test_logreg_is_one_affine_map_of_the_flattened_input():
    torch.manual_seed(0)
    model = build_model("logreg", (60,), 10)
    assert sum(p.numel() for p in model.parameters()) == 60 * 10 + 10
    x = torch.randn(5, 60)
    weight, bias = model.head.weight.detach(), model.head.bias.detach()
    assert torch.allclose(model(x), x @ weight.T + bias, atol=1e-6)
    assert torch.equal(model.features(x), x)  # no hidden layer: the features are the input


def test_resnet18_is_torchvisions_with_a_small_image_stem():
    model = build_model("resnet18", (3, 32, 32), 10)
    backbone = model.features
    assert backbone.conv1.kernel_size == (3, 3) and backbone.conv1.stride == (1, 1)
    assert isinstance(backbone.maxpool, torch.nn.Identity)
    assert sum(p.numel() for p in model.parameters()) > 11_000_000  # ResNet-18 scale


def test_cnn_bn_is_cnn_with_batch_norm_before_each_relu():
    torch.manual_seed(0)
    plain, bn = build_model("cnn", (1, 8, 8), 10), build_model("cnn-bn", (1, 8, 8), 10)
    layers = list(bn.features)
    norms = [
        i for i, m in enumerate(layers) if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)
    ]
    assert [type(layers[i]).__name__ for i in norms] == [
        "BatchNorm2d",
        "BatchNorm2d",
        "BatchNorm1d",
    ]
    assert all(isinstance(layers[i - 1], (torch.nn.Conv2d, torch.nn.Linear)) for i in norms)
    assert all(isinstance(layers[i + 1], torch.nn.ReLU) for i in norms)
    # the rest is cnn: same layers once the norms are removed, same parameter shapes
    assert [type(m) for i, m in enumerate(layers) if i not in norms] == [
        type(m) for m in plain.features
    ]
    # buffers: the running statistics of the three norms (cnn has none)
    buffers = [k for k in bn.state_dict() if k not in dict(bn.named_parameters())]
    assert sorted(k.rsplit(".", 1)[1] for k in buffers) == sorted(
        3 * ["running_mean", "running_var", "num_batches_tracked"]
    )
    assert set(plain.state_dict()) == set(dict(plain.named_parameters()))
    assert sum(p.numel() for p in bn.parameters()) - sum(
        p.numel() for p in plain.parameters()
    ) == 2 * (32 + 64 + 128)


def test_gradients_reach_every_parameter():
    model = build_model("cnn", (1, 8, 8), 10)
    loss = torch.nn.functional.cross_entropy(model(torch.randn(8, 1, 8, 8)), torch.arange(8))
    loss.backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())


@pytest.mark.parametrize(
    "name, shape, message",
    [
        ("cnn", (30,), "model 'cnn' needs images"),
        ("cnn", (1, 4, 4), "at least 8x8"),
        ("cnn-small", (30,), "model 'cnn-small' needs images"),
        ("cnn-bn", (30,), "model 'cnn-bn' needs images"),
        ("resnet18", (30,), "model 'resnet18' needs images"),
        ("vgg", (1, 8, 8), "unknown model 'vgg'"),
    ],
)
def test_model_data_mismatch_is_a_clear_error(name, shape, message):
    with pytest.raises(ValueError, match=message):
        build_model(name, shape, 10)


def test_registry_lists_the_classical_models():
    assert {"mlp", "cnn", "resnet18"} <= set(MODELS)


def parameter_count(name: str, shape: tuple[int, ...], num_classes: int) -> int:
    return sum(p.numel() for p in build_model(name, shape, num_classes).parameters())


@pytest.mark.parametrize(
    "student, teacher, shape, classes, expected",
    [
        # mlp, hidden h on d inputs: (d + 1) h + (h + 1) h + (h + 1) c
        ("mlp-small", "mlp", (1, 8, 8), 10, (65 * 24 + 25 * 24 + 25 * 10, 65 * 64 + 65 * 64 + 650)),
        ("mlp-small", "mlp", (30,), 2, (31 * 24 + 25 * 24 + 25 * 2, 31 * 64 + 65 * 64 + 65 * 2)),
        # cnn on 1 channel: conv 3x3 c1, conv 3x3 c2, FC 16 c2 -> e, head e -> 10
        (
            "cnn-small",
            "cnn",
            (1, 8, 8),
            10,
            (10 * 16 + 145 * 32 + (512 + 1) * 64 + 65 * 10, 10 * 32 + 289 * 64 + 1025 * 128 + 1290),
        ),
    ],
)
def test_students_are_about_a_quarter_of_their_teachers(student, teacher, shape, classes, expected):
    small, large = (
        parameter_count(student, shape, classes),
        parameter_count(teacher, shape, classes),
    )
    assert (small, large) == expected
    assert 0.2 < small / large < 0.3
