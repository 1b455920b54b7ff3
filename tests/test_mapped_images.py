"""``MappedImages``: uint8 rows read as standardised float32, equal to the former whole-array
loader; every indexing form the package uses; views that copy nothing."""

import numpy as np
import pytest
import torch

from flowerbed.data.image_cache import channel_statistics
from flowerbed.data.mapped_images import MappedImages, materialise, take


def images_nhwc(n=37, size=9, channels=3, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (n, size, size, channels), dtype=np.uint8)


def mapped(images_nhwc_, mean, std):
    return MappedImages(np.ascontiguousarray(images_nhwc_.transpose(0, 3, 1, 2)), mean, std)


def test_batches_equal_the_whole_array_standardisation(fl):
    train, test = images_nhwc(seed=0), images_nhwc(n=11, seed=1)
    old_train, old_test, old_mean, old_std = fl.whole_array_standardised(train, test)
    # with the former statistics, the per-batch result is the former array bit for bit
    same = mapped(train, old_mean, old_std)
    order = torch.randperm(len(train), generator=torch.Generator().manual_seed(0))
    assert np.array_equal(same[order[:8]].numpy(), old_train[order[:8].numpy()])
    assert np.array_equal(mapped(test, old_mean, old_std)[:].numpy(), old_test)
    # with the cache's exact statistics: within the former float32 reductions' rounding
    mean, std = channel_statistics([np.ascontiguousarray(train.transpose(0, 3, 1, 2))])
    x_train, x_test = mapped(train, mean, std), mapped(test, mean, std)
    assert x_train[:].dtype == torch.float32
    np.testing.assert_allclose(x_train[:].numpy(), old_train, atol=1e-5, rtol=0)
    np.testing.assert_allclose(x_test[:].numpy(), old_test, atol=1e-5, rtol=0)
    # ... and within float32 rounding of the exact (float64) standardisation
    exact_train, exact_test, _, _ = fl.whole_array_standardised(train, test, exact=True)
    np.testing.assert_allclose(x_train[:].numpy(), exact_train, atol=1e-6, rtol=0)
    np.testing.assert_allclose(x_test[:].numpy(), exact_test, atol=1e-6, rtol=0)


def test_statistics_stay_exact_where_float32_sums_lose_the_mean():
    # 2^25 values per channel: a float32 running sum stops growing by 0.5-sized steps at
    # 2^24, which made the former loader's mean wrong (0.2 instead of 0.5 on 20,000 random
    # 64 px images); counts of the 256 values are exact
    n = 2**25 // (32 * 32)
    images = np.zeros((n, 1, 32, 32), dtype=np.uint8)
    images[::2] = 255  # half black, half white: mean 0.5, std 0.5
    mean, std = channel_statistics([images])
    assert mean.tolist() == [0.5] and std.tolist() == [0.5]


def test_channel_statistics_are_exact_and_a_constant_channel_keeps_std_one():
    images = images_nhwc(n=50, channels=2, seed=3).transpose(0, 3, 1, 2).copy()
    images[:, 1] = 7  # a constant channel
    mean, std = channel_statistics([images[:20], images[20:]])  # in two chunks
    values = images.astype(np.float32) / np.float32(255)  # the float32 pixel values
    expected_mean = values.astype(np.float64).mean(axis=(0, 2, 3))
    assert mean.dtype == np.float32 and std.dtype == np.float32
    np.testing.assert_allclose(mean, expected_mean, rtol=1e-7)
    assert abs(std[0] - values[:, 0].astype(np.float64).std()) < 1e-7
    assert std[1] == 1.0


def test_every_indexing_form_matches_the_materialised_tensor():
    x = mapped(images_nhwc(n=20), [0.4, 0.5, 0.6], [0.2, 0.3, 0.25])
    full = x[:]
    assert len(x) == 20 and x.shape == full.shape == (20, 3, 9, 9)
    assert x.ndim == 4 and x.dtype == torch.float32 and x.shape[1:] == (3, 9, 9)
    index = torch.tensor([3, 0, 19, 3])
    assert torch.equal(x[index], full[index])
    assert torch.equal(x[index.numpy()], full[index])
    assert torch.equal(x[[1, 2]], full[[1, 2]])
    assert torch.equal(x[5], full[5]) and torch.equal(x[-1], full[-1])
    assert torch.equal(x[torch.tensor(4)], full[4])
    assert torch.equal(x[2:17:3], full[2:17:3])
    assert torch.equal(x[:, 0], full[:, 0]) and torch.equal(x[4, 1:], full[4, 1:])
    assert torch.equal(x[torch.arange(20) % 2 == 0], full[::2])  # a boolean mask
    with pytest.raises(TypeError, match="integers or booleans"):
        x[torch.tensor([0.5])]


def test_a_view_copies_nothing_and_composes():
    images = np.ascontiguousarray(images_nhwc(n=30).transpose(0, 3, 1, 2))
    x = MappedImages(images, [0.5] * 3, [0.25] * 3)
    view = take(x, np.array([29, 4, 7, 7, 12]))
    assert isinstance(view, MappedImages) and view.images is images  # the same array
    assert len(view) == 5 and view.shape == (5, 3, 9, 9)
    assert torch.equal(view[:], x[:][[29, 4, 7, 7, 12]])
    inner = take(view, torch.tensor([4, 0]))
    assert torch.equal(inner[:], x[:][[12, 29]]) and torch.equal(inner[1], x[29])
    assert torch.equal(view[1:3], x[:][[4, 7]])
    # tensors: take indexes, materialise returns them as they are
    tensor = torch.arange(12.0).reshape(6, 2)
    assert torch.equal(take(tensor, np.array([5, 0])), tensor[[5, 0]])
    assert materialise(tensor) is tensor
    assert torch.equal(materialise(view), view[:])


def test_only_uint8_nchw_images_are_accepted():
    with pytest.raises(ValueError, match="uint8"):
        MappedImages(np.zeros((2, 3, 4, 4), dtype=np.float32), [0, 0, 0], [1, 1, 1])
