"""Where a biLM's weights come from: the one route from a name, path or URL
to a loaded :class:`~spacy_elmo.bilm.BiLM`.

The hub (:mod:`spacy_elmo.hub`) turns a name, path or URL into local files
and knows no weight format; this module hands it the published format's
check (:func:`spacy_elmo.bilm.weights.read_checked`; for an ELMoForManyLangs
model directory, :func:`spacy_elmo.bilm.formats.efml.load`). A fresh
download of the published format is read and checked once: the arrays the
check read are the ones the model gets. An ELMoForManyLangs download (a zip)
is loaded once by the check and once more for the model, with the caller's
settings.
``BiLM.from_pretrained``, the ``elmo`` component's weights (factory config,
``[initialize]``, first use, :func:`spacy_elmo.add_elmo`) and the command
line all come through :func:`load_bilm`.
"""
from pathlib import Path
from typing import Dict, Optional, Tuple, Union

import numpy

from . import hub
from .bilm import BiLM
from .bilm.formats import efml
from .bilm.options import BiLMOptions, parameter_count
from .bilm.weights import WeightFileError, read_checked
from .hub import CacheError, DownloadError, ModelNotFoundError, families  # noqa: F401 (the errors of this module's functions)

PathLike = Union[str, Path]
Checked = Tuple[BiLMOptions, Dict[str, numpy.ndarray]]


#: Bytes a weights file may take beyond its float32 parameters, for the hdf5
#: layout (a few kB a dataset), which dominates for tiny models.
WEIGHTS_LAYOUT_BYTES = 16 << 20


def weights_max_bytes(options: BiLMOptions) -> int:
    """The most bytes a weights file for ``options`` may take when
    downloaded: twice its float32 parameters (room for float64 arrays) plus
    :data:`WEIGHTS_LAYOUT_BYTES`."""
    return 2 * 4 * parameter_count(options) + WEIGHTS_LAYOUT_BYTES


class _Check:
    """The published format's checks: :meth:`options` on the options before
    the weights are requested (its result bounds their size), the call on the
    pair; keeps what it read (a fresh download's options and arrays) for the
    model."""

    def __init__(self) -> None:
        self.read: Optional[Checked] = None

    def options(self, options: Path) -> int:
        return weights_max_bytes(BiLMOptions.from_file(options))

    def __call__(self, weights: Path, options: Path) -> None:
        if efml.is_model_dir(weights):
            efml.load(weights, token_cache_size=0)
        else:
            self.read = read_checked(weights, options)


def resolve(
    weights: Optional[PathLike] = None, options: Optional[PathLike] = None, *, progress: bool = True
) -> Tuple[Path, Path]:
    """:func:`spacy_elmo.hub.resolve` with the published format's checks on
    every download."""
    check = _Check()
    return hub.resolve(weights, options, check=check, check_options=check.options, progress=progress)


def download(name: str, *, progress: bool = True) -> Tuple[Path, Path]:
    """:func:`spacy_elmo.hub.download` with the published format's checks."""
    check = _Check()
    return hub.download(name, check=check, check_options=check.options, progress=progress)


def check_files(weights: PathLike, options: PathLike) -> None:
    """Raise unless ``weights`` loads as the published weight format against
    ``options`` (every dataset present, of the right shape, finite), without
    building a biLM; or, an ELMoForManyLangs model directory, as that."""
    _Check()(Path(weights), Path(options))


def load_bilm(
    weights: Optional[PathLike] = None,
    options: Optional[PathLike] = None,
    *,
    progress: bool = True,
    **kwargs,
) -> BiLM:
    """A biLM by name, path or URL: ``None``/``"english"`` (shipped with the
    package), ``"small"``, ``"medium"``, ``"original"``, ``"original-5.5b"``
    (AllenNLP's published English ELMo, downloaded once into the cache),
    ``"efml:<lang>"``, ``"nlpl:<id>"`` (the other families), a directory,
    weights file or zip, or an http(s) URL (see :mod:`spacy_elmo.hub`).
    ``kwargs`` go to :class:`~spacy_elmo.bilm.BiLM`."""
    _check_local_weights_file(weights)
    check = _Check()
    weights_path, options_path = hub.resolve(
        weights, options, check=check, check_options=check.options, progress=progress
    )
    if efml.is_model_dir(weights_path):
        return efml.load(weights_path, **kwargs)
    read = check.read if check.read is not None else read_checked(weights_path, options_path)
    return BiLM.from_datasets(*read, **kwargs)


def _check_local_weights_file(weights: Optional[PathLike]) -> None:
    """A local weights file (or a directory's ``weights.hdf5``) must be HDF5:
    said before the hub looks for the options beside it, so that a text
    file given as weights is named as such (h5py's signature check reads a
    few bytes)."""
    import h5py

    if weights is None or (isinstance(weights, str) and hub.is_url(weights)):
        return
    path = Path(weights).expanduser()
    if path.is_dir():
        path = path / "weights.hdf5"
    if path.is_file() and not h5py.is_hdf5(str(path)):
        raise WeightFileError(
            f"{path} is not an HDF5 file: ELMo weights are the bilm-tf/AllenNLP .hdf5 file "
            f"(their options a separate JSON file). {hub.HOW_TO_GIVE_WEIGHTS}"
        )


def check_local(weights: Optional[PathLike], options: Optional[PathLike] = None) -> None:
    """For ``weights`` that name an existing local file or directory, the
    checks that need no download and no array read: the weights file is
    HDF5, its options are found and valid. Names, URLs and paths that do
    not exist here pass (loading them names what is wrong). The ``elmo``
    component runs this at construction (``add_pipe``)."""
    if weights is None or any(isinstance(value, str) and hub.is_url(value) for value in (weights, options)):
        return
    if isinstance(weights, str) and weights.strip().lower() in (*hub.PUBLISHED_MODELS, *hub.SHIPPED_NAMES):
        return
    if not Path(weights).expanduser().exists():
        return
    if families.is_efml_dir(Path(weights).expanduser()) or families.is_zip_path(weights):
        return  # the other families' files are read and checked once, when loaded
    _check_local_weights_file(weights)
    _, options_path = hub.resolve(weights, options)
    BiLMOptions.from_file(options_path)

