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
line all come through :func:`load_bilm`; the component's ``add_pipe``
runs :func:`check_weights` first, which tells what can be told without a
download. The rules about what a user wrote live in
:func:`spacy_elmo.hub.locate`; the format's checks here.
"""
from pathlib import Path
from typing import Dict, Optional, Tuple, Union

import numpy

from . import hub
from .bilm import BiLM
from .bilm.formats import efml
from .bilm.options import BiLMOptions, parameter_count
from .bilm.weights import WeightFileError, read_checked
from .hub import CacheError, DownloadError, ModelNotFoundError  # noqa: F401 (the errors of this module's functions)
from .hub.families import check_zip
from .hub.help import PYTHON, Wording
from .hub.resolving import FILES, ZIP

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
        if weights.is_dir():  # the hub finds an ELMoForManyLangs model as its directory
            efml.load(weights, token_cache_size=0)
        else:
            self.read = read_checked(weights, options)


def resolve(
    weights: Optional[PathLike] = None,
    options: Optional[PathLike] = None,
    *,
    progress: bool = True,
    wording: Wording = PYTHON,
) -> Tuple[Path, Path]:
    """:func:`spacy_elmo.hub.resolve` with the published format's checks on
    every download."""
    check = _Check()
    return hub.obtain(locate(weights, options, wording), check=check, check_options=check.options, progress=progress)


def download(name: str, *, progress: bool = True) -> Tuple[Path, Path]:
    """:func:`spacy_elmo.hub.download` with the published format's checks."""
    check = _Check()
    return hub.download(name, check=check, check_options=check.options, progress=progress)


def check_files(weights: PathLike, options: PathLike) -> None:
    """Raise unless ``weights`` loads as the published weight format against
    ``options`` (every dataset present, of the right shape, finite), without
    building a biLM; or, an ELMoForManyLangs model directory, as that."""
    _Check()(Path(weights), Path(options))


def locate(weights: Optional[PathLike], options: Optional[PathLike] = None, wording: Wording = PYTHON) -> hub.Located:
    """:func:`spacy_elmo.hub.locate`, with a local weights file checked to be
    HDF5 (h5py reads its signature, a few bytes) before its options are
    looked for, so that a text file given as weights is named as such."""
    try:
        found = hub.locate(weights, options, wording=wording)
    except hub.OptionsNotFoundError as err:
        _check_hdf5(err.weights, wording)
        raise
    if found.kind == FILES and Path(found.weights).is_file():
        _check_hdf5(Path(found.weights), wording)
    return found


def _check_hdf5(path: Path, wording: Wording) -> None:
    import h5py

    if not h5py.is_hdf5(str(path)):
        raise WeightFileError(
            f"{path} is not an HDF5 file: ELMo weights are the bilm-tf/AllenNLP .hdf5 file "
            f"(their options a separate JSON file). {wording.advice}"
        )


def check_weights(
    weights: Optional[PathLike], options: Optional[PathLike] = None, *, wording: Wording = PYTHON
) -> None:
    """What can be told about ``weights``/``options`` without a download and
    without reading arrays: every rule of :func:`spacy_elmo.hub.locate`
    (unknown names, paths that do not exist, options that do not go with
    the weights), a local weights file is HDF5 and its options are valid, a
    local zip's listing is acceptable. The ``elmo`` component runs this at
    ``add_pipe``."""
    found = locate(weights, options, wording)
    if found.kind == FILES and Path(found.weights).is_file():
        BiLMOptions.from_file(found.pair()[1])
    elif found.kind == ZIP:
        check_zip(Path(found.weights))


def load_bilm(
    weights: Optional[PathLike] = None,
    options: Optional[PathLike] = None,
    *,
    progress: bool = True,
    wording: Wording = PYTHON,
    **kwargs,
) -> BiLM:
    """A biLM by name, path or URL: ``None``/``"english"`` (shipped with the
    package), ``"small"``, ``"medium"``, ``"original"``, ``"original-5.5b"``
    (AllenNLP's published English ELMo, downloaded once into the cache),
    ``"efml:<lang>"``, ``"nlpl:<id>"`` (the other families), a directory,
    weights file or zip, or an http(s) URL (see :mod:`spacy_elmo.hub`).
    ``wording``: how the entry point names the settings in errors.
    ``kwargs`` go to :class:`~spacy_elmo.bilm.BiLM`."""
    check = _Check()
    found = locate(weights, options, wording)
    weights_path, options_path = hub.obtain(found, check=check, check_options=check.options, progress=progress)
    try:
        if weights_path.is_dir():  # the hub finds an ELMoForManyLangs model as its directory
            return efml.load(weights_path, **kwargs)
        read = check.read if check.read is not None else read_checked(weights_path, options_path)
    except (ValueError, OSError) as err:
        hint = hub.stale_hint(weights_path) if found.kind != FILES else ""
        if hint:  # a cache entry (read, not downloaded, this time): say how to clear it
            err.args = (f"{err} ({hint})",) + err.args[1:]
        raise
    return BiLM.from_datasets(*read, **kwargs)
