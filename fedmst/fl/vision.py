"""torchvision's models and datasets by name: ``--model torchvision:NAME`` and
``--dataset torchvision:NAME:ROOT`` (the ``vision`` extra: ``scripts/setup.sh --vision``).

A model is any of torchvision's classification models (``torchvision.models.list_models``), built
with ``weights=None`` (nothing is downloaded) and ``num_classes`` the dataset's. Two adaptations,
so that the papers' small images fit: the first convolution takes the dataset's channels (FEMNIST's
one, not ImageNet's three), and a ResNet's stem, for images of at most :data:`SMALL_IMAGE` pixels a
side, is the 3x3, stride-1 convolution without max-pool that He et al. (2016) use for CIFAR-10
(ImageNet's 7x7, stride-2 stem and pool would leave 1x1 maps after the third stage of a 32x32
image). BatchNorm's running mean and variance are float buffers: they travel with the weights and
are averaged like them (:mod:`fedmst.fl.aggregation`); its integer ``num_batches_tracked`` stays
with each model (it only matters when ``momentum`` is None, which torchvision's models do not use).

A dataset is any of torchvision's image datasets with a train/test split (a ``train`` flag, or a
``split`` of ``"train"`` and ``"test"``: MNIST, FashionMNIST, KMNIST, CIFAR10, CIFAR100, SVHN, USPS,
...), read from ROOT in its own on-disk format (torchvision checks its files), as ``[C, H, W]``
floats in ``[0, 1]``. Nothing is downloaded unless ``--download`` asks (:func:`download`).
"""

from __future__ import annotations

import inspect
import math
from types import ModuleType
from typing import Any, Callable

import numpy as np
import torch
from torch import nn

from fedmst.errors import DatasetError, FedmstError, ModelError
from fedmst.fl.sources import Loaded
from fedmst.plugins import one_line

PREFIX = "torchvision:"
SMALL_IMAGE = 64
"""Images of at most this many pixels a side get a ResNet's small-image stem (CIFAR's 32, FEMNIST's 28)."""
INSTALL = "pip install 'fedmst[vision]' (scripts/setup.sh --vision)"

Factory = Callable[..., nn.Module]


def is_vision(spec: str) -> bool:
    """Whether ``spec`` names one of torchvision's models or datasets.

    >>> is_vision("torchvision:resnet18"), is_vision("cnn")
    (True, False)
    """
    return spec.startswith(PREFIX)


def _torchvision(spec: str, error: type[FedmstError]) -> ModuleType:
    try:
        import torchvision
    except ImportError as exc:  # not installed, or a build that does not match this torch
        raise error(f"{spec!r} needs torchvision, which does not import here ({one_line(exc)}): {INSTALL}") from None
    return torchvision


def model_factory(spec: str) -> Factory:
    """The factory of ``torchvision:NAME``, or :class:`ModelError` in one line for a name torchvision
    does not know as a classification model."""
    name = spec.removeprefix(PREFIX)
    tv = _torchvision(spec, ModelError)
    names = tv.models.list_models(module=tv.models)
    if name not in names:
        shown = ", ".join(n for n in names if n in ("resnet18", "resnet50", "mobilenet_v3_small", "vgg11",
                                                     "efficientnet_b0", "densenet121"))
        raise ModelError(f"model {spec!r}: torchvision {tv.__version__} has no classification model {name!r} "
                         f"(e.g. {shown}; {len(names)} in torchvision.models.list_models())")

    def build(num_classes: int, input_shape: tuple[int, ...]) -> nn.Module:
        if len(input_shape) != 3:
            raise ValueError(f"torchvision's models take images [C, H, W], not inputs of shape {list(input_shape)}")
        channels, height, width = input_shape
        model = tv.models.get_model(name, weights=None, num_classes=num_classes, **_arguments(name, height, width))
        if isinstance(model, tv.models.ResNet) and max(height, width) <= SMALL_IMAGE:
            model.conv1 = nn.Conv2d(channels, model.conv1.out_channels, 3, stride=1, padding=1, bias=False)
            model.maxpool = nn.Identity()
        _first_conv_takes(model, channels)
        return model

    return build


def _arguments(name: str, height: int, width: int) -> dict[str, Any]:
    """What a model's builder needs besides ``num_classes`` to train here: GoogLeNet and Inception v3
    without their auxiliary heads (they return a tuple while training) and with the initialisation
    stated (else they warn); a vision transformer told the images' side (it is built for 224)."""
    if name in ("googlenet", "inception_v3"):
        return {"aux_logits": False, "init_weights": True}
    if name.startswith("vit_") and height == width:
        return {"image_size": height}
    return {}


def _first_conv_takes(model: nn.Module, channels: int) -> None:
    """Give ``model``'s first convolution ``channels`` input channels (one for grayscale images),
    keeping its other settings."""
    for parent in model.modules():
        for child_name, child in parent.named_children():
            if isinstance(child, nn.Conv2d):
                if child.in_channels != channels:
                    setattr(parent, child_name, nn.Conv2d(
                        channels, child.out_channels, child.kernel_size, stride=child.stride, padding=child.padding,
                        dilation=child.dilation, groups=math.gcd(child.groups, channels), bias=child.bias is not None))
                return


Splits = tuple[dict[str, Any], dict[str, Any]]
"""The arguments that choose a torchvision dataset's train split, and its test split."""


def _dataset_class(spec: str) -> tuple[type, str, str, Splits]:
    """torchvision's class for ``torchvision:NAME:ROOT``, with NAME, ROOT and its splits' arguments."""
    name, colon, root = spec.removeprefix(PREFIX).partition(":")
    if not colon or not name or not root:
        raise DatasetError(f"dataset {spec!r}: give torchvision:NAME:ROOT, e.g. torchvision:CIFAR10:/data/cifar10")
    tv = _torchvision(spec, DatasetError)
    cls = getattr(tv.datasets, name, None)
    if not (isinstance(cls, type) and issubclass(cls, tv.datasets.VisionDataset)):
        raise DatasetError(f"dataset {spec!r}: torchvision {tv.__version__} has no dataset {name!r} "
                           "(names as in torchvision.datasets: CIFAR10, CIFAR100, MNIST, FashionMNIST, SVHN, ...)")
    splits = _splits(cls)
    if splits is None:
        raise DatasetError(f"dataset {spec!r}: torchvision's {name} has no train/test split fedmst can ask for "
                           "(a train flag, or split='train'/'test'); use imagefolder:ROOT or a dataset factory")
    return cls, name, root, splits


def _splits(cls: type) -> Splits | None:
    """The arguments that choose the train and test split of a torchvision dataset class, or None
    where it has no such flag or needs an argument besides ROOT that fedmst does not give (a
    ``split`` whose values are not ``train`` and ``test``, EMNIST's, is found when it is read)."""
    parameters = inspect.signature(cls.__init__).parameters
    needed = [n for n, p in list(parameters.items())[2:] if p.default is inspect.Parameter.empty
              and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and n not in ("train", "split")]
    if needed:
        return None
    if "train" in parameters:
        return {"train": True}, {"train": False}
    if "split" in parameters:
        return {"split": "train"}, {"split": "test"}
    return None


def read(spec: str) -> Loaded:
    """The dataset ``torchvision:NAME:ROOT`` names, from ROOT as torchvision keeps it, or
    :class:`DatasetError` in one line saying where to put it (or that ``--download`` fetches it)."""
    cls, name, root, splits = _dataset_class(spec)
    parts = []
    for split in splits:
        try:
            parts.append(_tensors(cls(root, download=False, **split)))
        except (RuntimeError, OSError, ValueError) as exc:
            said = " ".join(str(exc).split())
            if "for argument split" in said:  # torchvision's check of the split's value: EMNIST's name variants
                raise DatasetError(f"dataset {spec!r}: torchvision's {name} has no split called train and test "
                                   f"({said[:120]}); use imagefolder:ROOT or a dataset factory") from None
            raise DatasetError(f"dataset {spec!r}: torchvision's {name} is not in {root} ({said[:100]}); put its "
                               f"files in {_folder(cls, name, root)} as torchvision keeps them, or add --download "
                               "to fetch them") from None
    (x_train, y_train), (x_test, y_test) = parts
    return Loaded((x_train, y_train, x_test, y_test))


def _folder(cls: type, name: str, root: str) -> str:
    """Where torchvision looks for a dataset's files under ROOT: CIFAR's ``base_folder``
    (``cifar-10-batches-py``), the MNIST family's ``NAME/raw``, else ROOT itself."""
    base = getattr(cls, "base_folder", None)
    if isinstance(base, str):
        return f"{root.rstrip('/')}/{base}"
    if isinstance(getattr(cls, "raw_folder", None), property):
        return f"{root.rstrip('/')}/{name}/raw"
    return root


def download(spec: str) -> None:
    """Fetch ``torchvision:NAME:ROOT``'s files into ROOT (``--download``), once, before a run reads them."""
    cls, name, root, splits = _dataset_class(spec)
    for split in splits:
        try:
            cls(root, download=True, **split)
        except Exception as exc:  # noqa: BLE001 - no network, a full disk, a changed mirror: one line
            raise DatasetError(f"dataset {spec!r}: downloading torchvision's {name} into {root} failed: "
                               f"{one_line(exc)[:160]}") from None


def _tensors(dataset: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """A torchvision dataset's images as ``[N, C, H, W]`` floats in ``[0, 1]`` and its labels.

    Its in-memory arrays where it keeps them (``data`` with ``targets`` or ``labels``: CIFAR, MNIST,
    SVHN, ...), else each sample as its ``__getitem__`` gives it, turned into a tensor."""
    images, labels = getattr(dataset, "data", None), getattr(dataset, "targets", getattr(dataset, "labels", None))
    if isinstance(images, (np.ndarray, torch.Tensor)) and labels is not None and len(images) == len(labels):
        x = torch.as_tensor(np.asarray(images))
        if x.dim() == 3:  # [N, H, W]: grayscale
            x = x[:, None]
        elif x.dim() == 4 and x.shape[-1] in (1, 3, 4) and x.shape[1] not in (1, 3, 4):  # [N, H, W, C]
            x = x.permute(0, 3, 1, 2)
        y = torch.as_tensor(np.asarray(labels), dtype=torch.int64)
    else:
        from torchvision.transforms.functional import pil_to_tensor

        pairs = [dataset[i] for i in range(len(dataset))]
        x = torch.stack([pil_to_tensor(image) if not isinstance(image, torch.Tensor) else image for image, _ in pairs])
        y = torch.tensor([int(label) for _, label in pairs], dtype=torch.int64)
    x = x.contiguous()
    scale = 255.0 if x.dtype == torch.uint8 else 1.0
    return x.float().div_(scale), y
