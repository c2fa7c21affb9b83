"""The biLM inside thinc: :class:`BiLMShim`, a ``PyTorchShim`` whose model is
the :class:`~spacy_elmo.bilm.BiLM`, serialized in the published hdf5 format
plus the options JSON, so a saved pipeline carries the weights in the same
format bilm-tf reads and needs no outside file (an ELMoForManyLangs biLM:
its two state dicts as hdf5 and its vocabularies,
:func:`spacy_elmo.bilm.formats.efml.to_fields`). The shim holds no biLM
(None) until the weights are given (:meth:`BiLMShim.set_bilm`) or read
(``from_bytes``).

The shim also holds the inference settings the config gives
(``precision``, ``token_cache_size`` of ``spacy_elmo.ElmoBiLM.v2``): they
are applied to every biLM it gets, once, and they are not part of the
saved bytes (the pipeline's config holds them).

The saved bytes carry a SHA-256 of the options and the weights (and an
ELMoForManyLangs biLM's vocabularies; :func:`bilm_checksum`), checked when
they are read back, after the
options are validated and before the weights are read: an edit that keeps
every shape valid (flipped float bytes, a changed clip value) is refused, and so are bytes without one.
"""
import hashlib
import io
import json
from typing import Any, Dict, Optional

import srsly
import torch
from thinc.api import Model, PyTorchShim, get_torch_default_device

from ..bilm import BiLM, BiLMOptions, OptionsError, WeightFileError
from ..bilm.family import FAMILY_BILM_TF
from ..bilm.fast.engine import check_precision
from ..bilm.fast.token_cache import check_token_cache_size
from ..bilm.formats import efml
from ..bilm.weights import read_datasets, save_hdf5
from ..hub.help import HOW_TO_GIVE_WEIGHTS

NOT_INITIALIZED = (
    "The elmo biLM has no weights yet: call nlp.initialize() (with no weights given it loads "
    "the English biLM shipped with spacy_elmo). " + HOW_TO_GIVE_WEIGHTS + " In Python also "
    "spacy_elmo.add_elmo(nlp, NAME) or nlp.get_pipe('elmo').set_bilm(BiLM(...))."
)
#: What to do about a saved biLM that cannot be read (shared by
#: :mod:`spacy_elmo.component.saved_pipeline`).
RESAVE = (
    "re-save the pipeline from a working copy (nlp.to_disk), or re-initialize the elmo component "
    "from the published weights and options"
)


def _serialize_bilm(module: Optional[torch.nn.Module]) -> bytes:
    if not isinstance(module, BiLM):
        return b""
    if module.vocabulary is not None:  # ELMoForManyLangs: its own tensors and vocabularies
        fields = {"options": module.options.to_dict(), **efml.to_fields(module)}
    else:
        buffer = io.BytesIO()
        save_hdf5(module, buffer)
        fields = {"options": module.options.to_dict(), "weights": buffer.getvalue()}
    fields["sha256"] = bilm_checksum(fields["options"], fields["weights"], fields.get("vocabulary"))
    return srsly.msgpack_dumps(fields)


def bilm_checksum(options: Dict[str, Any], weights: bytes, vocabulary: Optional[Dict[str, Any]] = None) -> str:
    """SHA-256 over what a saved biLM holds: its options (canonical JSON:
    sorted keys, no spaces), a zero byte, and its hdf5 weight bytes; for an
    ELMoForManyLangs biLM, then a zero byte and its vocabularies (canonical
    JSON)."""
    digest = hashlib.sha256(_canonical(options))
    digest.update(b"\0")
    digest.update(weights)
    if vocabulary is not None:
        digest.update(b"\0")
        digest.update(_canonical(vocabulary))
    return digest.hexdigest()


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode("utf-8")


def _check_checksum(msg: Dict[str, Any], where: str) -> None:
    """The saved SHA-256 must match the options, weights (and
    vocabularies) saved with it."""
    saved = msg.get("sha256")
    if not isinstance(saved, str):
        raise WeightFileError(
            f"{where} carries no SHA-256 checksum of its weights and options (field 'sha256'); {RESAVE}"
        )
    try:
        actual = bilm_checksum(msg["options"], msg["weights"], msg.get("vocabulary"))
    except (TypeError, ValueError) as err:  # fields that are not JSON (crafted)
        raise WeightFileError(f"{where}: its options cannot be checksummed ({err}); {RESAVE}") from None
    if saved != actual:
        raise WeightFileError(
            f"{where}: its weights or options do not match the SHA-256 checksum saved with them "
            f"(saved {str(saved)[:16]}..., now {actual[:16]}...): the file was changed or damaged after it was "
            f"saved; {RESAVE}"
        )


def msgpack_map(data: bytes, where: str, error: type) -> Dict[str, Any]:
    """The map in msgpack ``data`` (srsly's reader), or an ``error`` naming
    ``where`` and what to do."""
    try:
        msg = srsly.msgpack_loads(data)
    except Exception as err:  # msgpack raises several unrelated classes
        raise error(f"{where}: not readable msgpack ({type(err).__name__}: {err}); {RESAVE}") from None
    if not isinstance(msg, dict):
        raise error(f"{where}: a msgpack {type(msg).__name__}, expected a map; {RESAVE}")
    return msg


def read_saved_bilm(data: bytes) -> BiLM:
    """The biLM of a saved pipeline (``spacy.load``, ``from_bytes``): the
    fields are type-checked, the options validated (bounds, parameter
    count) and the weights read and shape-checked, all before the model is
    allocated; anything wrong is an :class:`OptionsError` or a
    :class:`WeightFileError` (msgpack and hdf5 only: nothing is unpickled);
    the checksum is checked before the weights are read. The inference
    settings are not part of the bytes: the config holds them."""
    where = "the elmo component's saved biLM"
    msg = msgpack_map(data, where, WeightFileError)
    if not isinstance(msg.get("options"), dict):
        found = "missing" if "options" not in msg else type(msg["options"]).__name__
        raise OptionsError(f"{where} holds no biLM options (field 'options' is {found}); {RESAVE}", ["options"])
    try:
        options = BiLMOptions.from_dict(msg["options"])
    except OptionsError as err:
        raise OptionsError(f"{where}: {err}; {RESAVE}", err.fields) from None
    if not isinstance(msg.get("weights"), bytes):
        raise WeightFileError(f"{where} holds no weights (field 'weights' is missing or not bytes); {RESAVE}")
    _check_checksum(msg, where)
    if options.family != FAMILY_BILM_TF:
        try:
            return efml.from_fields(options, msg, where)
        except efml.EfmlFormatError as err:
            raise WeightFileError(f"{err}; {RESAVE}") from None
    return BiLM.from_datasets(options, read_datasets(io.BytesIO(msg["weights"]), options))


class BiLMShim(PyTorchShim):
    """The thinc shim of the biLM (see the module docstring)."""

    def __init__(self, bilm: Optional[BiLM] = None, *, precision: str = "fp32", token_cache_size: int = 50_000) -> None:
        #: The inference settings applied to every biLM this shim gets.
        self.precision = check_precision(precision)
        self.token_cache_size = check_token_cache_size(token_cache_size)
        super().__init__(None, serialize_model=_serialize_bilm, deserialize_model=self._deserialize)
        if bilm is not None:
            self.set_bilm(bilm)

    def _configure(self, bilm: BiLM) -> BiLM:
        bilm.precision = self.precision
        bilm.token_cache.max_size = self.token_cache_size
        return bilm

    def set_bilm(self, bilm: BiLM) -> None:
        """Hold ``bilm``, on thinc's default device (``spacy.require_gpu()``,
        ``spacy train --gpu-id``), with this shim's settings."""
        if not isinstance(bilm, BiLM):
            raise TypeError(f"expected a spacy_elmo.BiLM, found {type(bilm).__name__}")
        if bilm.device.type == "cpu":
            bilm.to(get_torch_default_device())
        self._model = self._configure(bilm)

    def _deserialize(self, module: Optional[torch.nn.Module], data: bytes, device: torch.device):
        if not data:
            return module
        return self._configure(read_saved_bilm(data)).to(device)

    @property
    def device(self):
        return get_torch_default_device() if self._model is None else super().device

    def finish_update(self, optimizer) -> None:
        if self._model is not None:
            super().finish_update(optimizer)

    def to_device(self, device_type: str, device_id: int) -> None:
        if self._model is not None:
            super().to_device(device_type, device_id)


def has_bilm(model: Model) -> bool:
    return isinstance(model.shims[0]._model, BiLM)


def get_bilm(model: Model) -> BiLM:
    bilm = model.shims[0]._model
    if not isinstance(bilm, BiLM):
        raise ValueError(NOT_INITIALIZED)
    return bilm


def set_bilm(model: Model, bilm: BiLM) -> None:
    shim = model.shims[0]
    assert isinstance(shim, BiLMShim)
    shim.set_bilm(bilm)
