"""An engine's inputs: which profile a feed falls in, and feeds cast to TensorRT's input types."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
import numpy as np

from ..errors import VerifyError
from .profiles import ProfileShapes, feed_key, find_profile


def check_in_profiles(profiles: Sequence[ProfileShapes], inputs, feed: Mapping[str, np.ndarray], shape_tensors,
                      k: int) -> int | None:
    """The profile that holds ``feed``; VerifyError naming the shapes and the profiles if none."""
    key = feed_key(feed, shape_tensors)
    if not profiles:  # a static engine: the model's own shapes
        for info in inputs:
            want = tuple(d for d in info.dims)
            if info.name in key and not info.shape_tensor and key[info.name] != want:
                raise VerifyError(f"shape point {k}: input {info.name!r} has shape {list(key[info.name])}; "
                                  f"the engine is static {list(want)}")
        return None
    idx = find_profile(profiles, key)
    if idx is None:
        got = ", ".join(f"{n}={list(s)}" for n, s in key.items())
        have = " | ".join(f"profile {i}: {p.describe()}" for i, p in enumerate(profiles))
        raise VerifyError(f"shape point {k} ({got}) is outside every optimization profile of the engine ({have})")
    return idx


def _cast(name: str, arr: np.ndarray, want: np.dtype | None) -> np.ndarray:
    if want is None or arr.dtype == want:
        return arr
    if np.issubdtype(arr.dtype, np.integer) and np.issubdtype(want, np.integer):
        info = np.iinfo(want)
        if arr.size and (arr.min() < info.min or arr.max() > info.max):
            raise VerifyError(f"input {name!r} holds values outside {want} (TensorRT's type for it)")
    return np.ascontiguousarray(arr.astype(want))
