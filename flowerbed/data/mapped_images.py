"""``MappedImages``: uint8 images (usually a memory map) read as standardised float32 tensors.

The cached data sets (``image_cache``) keep their images as uint8 ``(N, C, H, W)`` maps
shared by every process. ``MappedImages`` stands where a float32 tensor of the whole set used
to: ``len(x)``, ``x.shape``, ``x.ndim``, ``x.dtype``, and indexing by an int, a slice, an index
tensor or array (and a tuple whose first item is one of those), so that mini-batches
(``x[idx]``), evaluation in chunks (``x[i:j]``) and ``x[:, 0]`` work unchanged. Indexing reads
only the selected rows and returns a new float32 tensor::

    (float32(u) / 255 - mean[c]) / std[c]

computed in float32 numpy operations in exactly the order the former whole-array loader used,
so with the same statistics a batch equals the rows of the former tensor bit for bit.

``subset(indices)`` is a view on some rows (a client's share, the server's split) that copies
nothing: a client reads its batches from the shared map, so its memory does not grow with the
image size. ``x[:]`` materialises the whole (sub)set as a tensor: for code that needs one
array (``materialise``).
"""

from __future__ import annotations

import numpy as np
import torch


class MappedImages:
    """uint8 images ``(N, C, H, W)`` with per-channel ``mean``/``std`` of the [0, 1] values,
    read as standardised float32 tensors; ``rows``: this view's rows of ``images`` (None = all).
    """

    def __init__(
        self,
        images: np.ndarray,
        mean: np.ndarray,
        std: np.ndarray,
        rows: np.ndarray | None = None,
    ) -> None:
        if images.dtype != np.uint8 or images.ndim != 4:
            raise ValueError(
                f"MappedImages needs uint8 (N, C, H, W), got {images.dtype} {images.shape}"
            )
        channels = images.shape[1]
        self.images = images
        self.mean = np.asarray(mean, dtype=np.float32).reshape(1, channels, 1, 1)
        self.std = np.asarray(std, dtype=np.float32).reshape(1, channels, 1, 1)
        self.rows = None if rows is None else np.asarray(rows, dtype=np.int64).reshape(-1)

    def __len__(self) -> int:
        return len(self.images) if self.rows is None else len(self.rows)

    @property
    def shape(self) -> torch.Size:
        return torch.Size((len(self), *self.images.shape[1:]))

    @property
    def ndim(self) -> int:
        return 4

    @property
    def dtype(self) -> torch.dtype:
        return torch.float32

    def __repr__(self) -> str:
        return f"MappedImages(shape={tuple(self.shape)}, of {len(self.images)} mapped images)"

    def subset(self, indices) -> MappedImages:
        """The rows ``indices`` (an index tensor or array) of this view, as a view."""
        return MappedImages(self.images, self.mean, self.std, self._rows(_as_index(indices)))

    def __getitem__(self, key) -> torch.Tensor:
        if isinstance(key, tuple):  # x[rows, rest...]: select rows, then index the tensor
            first, rest = key[0], key[1:]
            selected = self[first]
            single = isinstance(_as_index(first), int)
            return selected[rest] if single else selected[(slice(None), *rest)]
        key = _as_index(key)
        if isinstance(key, int):
            return self._standardise(self.images[self._rows(key)][None])[0]
        return self._standardise(self.images[self._rows(key)])

    def _rows(self, key):
        """Rows of ``self.images`` for ``key`` (int, slice or index array) of this view."""
        if self.rows is None:
            return key
        return self.rows[key]

    def _standardise(self, raw: np.ndarray) -> torch.Tensor:
        # the former loader's operations, in its order: astype(float32) / 255.0, then
        # (x - mean) / std with float32 mean and std of shape (1, C, 1, 1)
        x = raw.astype(np.float32)
        x /= 255.0
        x -= self.mean
        x /= self.std
        return torch.from_numpy(x)


def _as_index(key):
    """``key`` as an int, a slice or a numpy index array."""
    if isinstance(key, slice):
        return key
    if isinstance(key, torch.Tensor):
        key = key.numpy()
    array = np.asarray(key)
    if array.ndim == 0 and array.dtype.kind in "iu":
        return int(array)
    if array.dtype.kind not in "iub":
        raise TypeError(f"MappedImages index must be integers or booleans, got {array.dtype}")
    return array


def take(x: torch.Tensor | MappedImages, indices) -> torch.Tensor | MappedImages:
    """Rows ``indices`` of ``x``: a view of mapped images (nothing copied), a tensor's rows."""
    if isinstance(x, MappedImages):
        return x.subset(indices)
    return x[indices]


def materialise(x: torch.Tensor | MappedImages) -> torch.Tensor:
    """``x`` as one tensor (a float32 copy of mapped images; a tensor as it is), for code that
    needs whole-array operations (reshape, column permutations)."""
    return x[:] if isinstance(x, MappedImages) else x
