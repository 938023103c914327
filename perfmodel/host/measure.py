"""Measure the per-sample CPU cost of input pipelines on this machine.

``perfmodel calibrate --device cpu --only input`` runs :func:`measure_input_costs`; the values
replace :data:`perfmodel.host.input_pipeline.DATASETS`' defaults when the profile is given with
``--calibration``. Each routine re-implements what the framework's loader does per sample with
the libraries installed here (Pillow for JPEG, NumPy, SciPy), since the frameworks themselves are
not dependencies of perfmodel:

- ImageNet JPEG, PyTorch/Keras path: Pillow decode of a 500x375 JPEG (quality 90, ~100 KB, the
  size of an average ImageNet training file), torchvision ``RandomResizedCrop(224)`` (scale
  0.08-1, ratio 3/4-4/3, bilinear resize of the crop box), ``RandomHorizontalFlip``,
  ``ToTensor`` + ``Normalize`` to a CHW float32 array.
- CIFAR in memory, PyTorch path: ``Image.fromarray``, 4-pixel pad, random 32x32 crop, flip,
  ``ToTensor`` + ``Normalize`` (torchvision's per-sample PIL transforms).
- CIFAR, Keras path: ``ImageDataGenerator(width_shift_range=0.1, height_shift_range=0.1,
  horizontal_flip=True)``: one ``scipy.ndimage.affine_transform`` (order 1, ``nearest``) per
  channel, as keras_preprocessing ``apply_affine_transform`` does, then the flip.
- CIFAR, tf.data path: the same crop/flip/normalise with NumPy per sample (TensorFlow's C++ kernels
  are faster; this is an upper bound).

Time is CPU time of the measuring thread (``time.thread_time``), so other processes sharing the
core do not inflate it; the result is the median over repeated batches, seconds per sample.
"""

from __future__ import annotations

import io
import statistics
import time
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from perfmodel.errors import CalibrationError
from perfmodel.host.input_pipeline import DatasetKind, LoaderKind

_MEAN = np.array([0.485, 0.456, 0.406], np.float32)
_STD = np.array([0.229, 0.224, 0.225], np.float32)


def _per_sample(fn: Callable[[int], object], n: int, repeats: int) -> list[float]:
    """CPU seconds per sample of ``repeats`` batches of ``n`` calls (after one warm-up call)."""
    fn(0)  # warm-up (imports, caches)
    out = []
    for _ in range(repeats):
        t0 = time.thread_time()
        for k in range(n):
            fn(k)
        out.append((time.thread_time() - t0) / n)
    return out


def _jpeg_bytes(rng: np.random.Generator) -> bytes:
    from PIL import Image

    yy, xx = np.mgrid[0:375, 0:500]
    base = np.stack([(xx * 0.5 + yy * 0.3) % 256, (xx * 0.2 + yy * 0.7) % 256, (xx + yy) % 256], -1)
    img = np.clip(base + rng.normal(0, 20, base.shape), 0, 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, "JPEG", quality=90)
    return buf.getvalue()


def measure_input_costs(
    *, samples: int = 64, repeats: int = 5, seed: int = 0
) -> dict[tuple[DatasetKind, LoaderKind], float]:
    """CPU seconds per sample of each (data set, loader) path: the median of
    :func:`measure_input_timings`."""
    return {
        k: float(statistics.median(v))
        for k, v in measure_input_timings(samples=samples, repeats=repeats, seed=seed).items()
    }


def measure_input_timings(
    *, samples: int = 64, repeats: int = 5, seed: int = 0
) -> dict[tuple[DatasetKind, LoaderKind], list[float]]:
    """CPU seconds per sample of each (data set, loader) path this machine can run, one value
    per timed batch.

    Parameters
    ----------
    samples
        Samples per timed batch (CIFAR paths use 8x as many: they are ~30x cheaper).
    repeats
        Timed batches; the median is returned.
    seed
        Seed of the random augmentation parameters and of the synthetic images.

    Raises
    ------
    CalibrationError
        When Pillow (the imaging library the JPEG and PyTorch paths need) is not installed.
    """
    try:
        from PIL import Image, ImageOps
    except ImportError as exc:  # pragma: no cover - Pillow ships with matplotlib
        raise CalibrationError(
            "input-pipeline calibration needs Pillow (pip install pillow)",
            value="PIL",
            where="calibrate --only input",
        ) from exc
    import scipy.ndimage as ndi

    rng = np.random.default_rng(seed)
    data = _jpeg_bytes(rng)
    cifar = rng.integers(0, 256, size=(512, 32, 32, 3), dtype=np.uint8)
    flip = Image.Transpose.FLIP_LEFT_RIGHT

    def to_tensor(a: np.ndarray) -> np.ndarray:
        return ((a.astype(np.float32) / 255.0 - _MEAN) / _STD).transpose(2, 0, 1).copy()

    def imagenet_pil(_k: int) -> object:
        im = Image.open(io.BytesIO(data)).convert("RGB")
        w, h = im.size
        area = rng.uniform(0.08, 1.0) * w * h
        ratio = float(np.exp(rng.uniform(np.log(3 / 4), np.log(4 / 3))))
        cw = int(min(w, round((area * ratio) ** 0.5)))
        ch = int(min(h, round((area / ratio) ** 0.5)))
        i = int(rng.integers(0, h - ch + 1))
        j = int(rng.integers(0, w - cw + 1))
        im = im.resize((224, 224), Image.Resampling.BILINEAR, box=(j, i, j + cw, i + ch))
        if rng.random() < 0.5:
            im = im.transpose(flip)
        return to_tensor(np.asarray(im))

    def cifar_pil(k: int) -> object:
        im = ImageOps.expand(Image.fromarray(cifar[k % 512]), border=4)
        i, j = (int(x) for x in rng.integers(0, 9, 2))
        im = im.crop((j, i, j + 32, i + 32))
        if rng.random() < 0.5:
            im = im.transpose(flip)
        return to_tensor(np.asarray(im))

    def cifar_numpy(k: int) -> object:
        p = np.pad(cifar[k % 512], ((4, 4), (4, 4), (0, 0)))
        i, j = (int(x) for x in rng.integers(0, 9, 2))
        a = p[i : i + 32, j : j + 32]
        if rng.random() < 0.5:
            a = a[:, ::-1]
        return to_tensor(a)

    def cifar_keras(k: int) -> object:
        a = cifar[k % 512].astype(np.float32)
        tx, ty = rng.uniform(-3.2, 3.2, 2)
        out = np.stack(
            [
                ndi.affine_transform(a[..., c], np.eye(2), offset=(tx, ty), order=1, mode="nearest")
                for c in range(3)
            ],
            -1,
        )
        return out[:, ::-1] if rng.random() < 0.5 else out

    jpeg = _per_sample(imagenet_pil, samples, repeats)
    return {
        (DatasetKind.IMAGENET_JPEG, LoaderKind.PYTORCH): jpeg,
        (DatasetKind.IMAGENET_JPEG, LoaderKind.KERAS): jpeg,
        (DatasetKind.CIFAR_MEMORY, LoaderKind.PYTORCH): _per_sample(
            cifar_pil, 8 * samples, repeats
        ),
        (DatasetKind.CIFAR_MEMORY, LoaderKind.TF_DATA): _per_sample(
            cifar_numpy, 8 * samples, repeats
        ),
        (DatasetKind.CIFAR_MEMORY, LoaderKind.KERAS): _per_sample(
            cifar_keras, 8 * samples, repeats
        ),
    }


def input_only(measurements: Iterable[Any]) -> bool:
    """True when every measurement is an ``input`` one (``calibrate --only input``): such a
    profile describes the host's loader, not the GPU, and fits any system."""
    kinds = {getattr(m.kind, "value", m.kind) for m in measurements}
    return kinds == {"input"}


def input_costs_of(measurements: Iterable[Any]) -> dict[tuple[DatasetKind, LoaderKind], float]:
    """Per-sample costs from a calibration profile's ``input`` measurements (median, seconds).

    Measurements of other kinds are ignored; a profile without any gives ``{}`` (the defaults
    of :data:`~perfmodel.host.input_pipeline.DATASETS` apply).
    """
    out: dict[tuple[DatasetKind, LoaderKind], float] = {}
    for m in measurements:
        if getattr(m.kind, "value", m.kind) != "input":
            continue
        key = (DatasetKind(m.params["dataset"]), LoaderKind(m.params["loader"]))
        out[key] = float(m.timing.median_s)
    return out


__all__ = ["input_costs_of", "input_only", "measure_input_costs", "measure_input_timings"]
