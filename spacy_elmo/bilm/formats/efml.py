"""ELMoForManyLangs model directories: read, checked, written.

A model directory (HIT-SCIR's ``elmoformanylangs``; the NLPL repository
serves them zipped) holds:

* ``config.json``: training arguments; ``config_path`` names the
  architecture JSON (``encoder`` and ``token_embedder`` blocks), often by an
  absolute path of its author's machine;
* ``char.dic`` and ``word.dic``: ``token<TAB>id`` lines;
* ``token_embedder.pkl`` and ``encoder.pkl``: PyTorch state dicts.

Choices:

* The ``.pkl`` files are read with ``torch.load(weights_only=True)``
  (PyTorch's restricted unpickler: tensors and plain containers, the legacy
  pre-1.6 format included). Anything else (a pickle that would build
  objects or run code) is refused with :class:`EfmlFormatError`; nothing
  from the file is executed. Each file is bounded (:data:`MAX_PKL_BYTES`,
  :data:`MAX_DIC_BYTES`, :data:`MAX_JSON_BYTES`) before it is read.
* The architecture is found as the reference finds it, but never outside
  the model directory: ``config_path`` when it is relative and inside the
  directory, then its file name in the directory, then the reference
  package's bundled configurations by file name
  (:data:`REFERENCE_ARCHITECTURES`), and finally it is inferred from the
  state dicts' shapes (a log line says so; the settings that shapes do not
  show take the reference configurations' values: clips 3, relu,
  50 characters a token). Whatever its source, the architecture is checked
  against every tensor's shape.
* ``.dic`` lines are read as the reference reads them: stripped of
  surrounding whitespace, split at tabs; a line with one field is the
  whitespace entry, stored as ``"\\u3000"`` (the ideographic space). Blank
  lines are skipped (the reference fails on them); a line with more than
  two fields, or an id that is not an integer, is an error naming the line.
* Only the ``cnn`` token embedder and the ``elmo`` encoder (the published
  models) are supported; others are refused by name.
* The highway layers are AllenNLP's (the gate multiplies the input); they
  are stored in this package's convention (the gate multiplies the
  transform) by negating the gate's weights and bias, and negated back on
  export, an exact round trip.
* :func:`save` writes the family's own layout back: both state dicts
  (``torch.save``), the two ``.dic`` files, ``config.json`` whose
  ``config_path`` names the architecture JSON beside it by file name.
"""
import json
import logging
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Optional, Tuple, Union

import torch

from ..chars import CharVocabulary
from ..options import FAMILY_EFML, BiLMOptions, OptionsError
from .efml_arch import (  # noqa: F401 (the format's names, in one place)
    INFERRED_DEFAULTS,
    REFERENCE_ARCHITECTURES,
    architecture,
    check_shapes,
    expected_shapes,
    find_architecture,
    infer_architecture,
    options_from_architecture,
)
from .efml_files import (  # noqa: F401
    FILES,
    MAX_DIC_BYTES,
    MAX_JSON_BYTES,
    MAX_PKL_BYTES,
    EfmlFormatError,
    load_state_dict,
    read_dic,
    read_json,
    write_dic,
)

if TYPE_CHECKING:  # the model imports this module: no import at run time
    from ..model import BiLM

logger = logging.getLogger("spacy_elmo")

PathLike = Union[str, Path]


# ------------------------------------------------------------------ loading
def load(path: PathLike, **kwargs) -> "BiLM":
    """A :class:`~spacy_elmo.BiLM` from an ELMoForManyLangs model directory
    (``kwargs`` go to the BiLM: ``stateful``, ``token_cache_size``, ...)."""
    folder = Path(path)
    if not folder.is_dir():
        raise EfmlFormatError(
            f"{folder} is not a directory (an ELMoForManyLangs model is a directory of {', '.join(FILES)})"
        )
    config = read_json(folder / "config.json")
    token_embedder = load_state_dict(folder / "token_embedder.pkl")
    encoder = load_state_dict(folder / "encoder.pkl")
    arch, source = find_architecture(folder, config)
    if arch is None:
        arch = infer_architecture(token_embedder, encoder)
        source = "inferred from the state dicts' shapes"
        logger.warning(
            "%s: no architecture JSON (%s); inferred it from the state dicts' shapes, with %s",
            folder, config.get("config_path"), ", ".join(f"{k}={v}" for k, v in INFERRED_DEFAULTS.items()),
        )
    where = f"{folder}: architecture ({source})"
    if "char_emb_layer.embedding.weight" not in token_embedder:
        raise EfmlFormatError(f"{folder / 'token_embedder.pkl'}: no tensor 'char_emb_layer.embedding.weight'")
    n_characters = int(token_embedder["char_emb_layer.embedding.weight"].shape[0])
    word_weight = token_embedder.get("word_emb_layer.embedding.weight")
    n_words = int(word_weight.shape[0]) if word_weight is not None else 0
    options = options_from_architecture(arch, where, n_characters, n_words)
    check_shapes(
        options, token_embedder, encoder,
        {"token_embedder": str(folder / "token_embedder.pkl"), "encoder": str(folder / "encoder.pkl")},
    )
    chars = read_dic(folder / "char.dic")
    words = read_dic(folder / "word.dic") if options.word_embedding_dim else None
    options.extra = {FAMILY_EFML: {"config": config, "architecture": arch}}
    return build(options, chars, words, token_embedder, encoder, where=str(folder), **kwargs)


def build(options: BiLMOptions, chars, words, token_embedder, encoder, *, where: str = "the model", **kwargs) -> "BiLM":
    """A BiLM of checked ``options`` with the reference's state dicts."""
    from ..model import BiLM

    try:
        vocabulary = CharVocabulary(chars, words, options.max_characters_per_token)
        model = BiLM(options, vocabulary=vocabulary, **kwargs)
    except (ValueError, OptionsError) as err:
        raise EfmlFormatError(f"{where}: {err}") from None
    copy_in(model, token_embedder, encoder)
    return model


def copy_in(model, token_embedder: Dict[str, torch.Tensor], encoder: Dict[str, torch.Tensor]) -> None:
    """Copy the reference's tensors into ``model`` (shapes already checked)."""
    enc = model.token_encoder
    te = token_embedder
    F = model.options.n_filters
    with torch.no_grad():
        enc.char_embedding.weight[0].zero_()
        enc.char_embedding.weight[1:].copy_(te["char_emb_layer.embedding.weight"])
        if enc.word_embedding is not None:
            enc.word_embedding.weight[0].zero_()
            enc.word_embedding.weight[1:].copy_(te["word_emb_layer.embedding.weight"])
        for i, conv in enumerate(enc.convs):
            conv.weight.copy_(te[f"convolutions.{i}.weight"])
            conv.bias.copy_(te[f"convolutions.{i}.bias"])
        for k, highway in enumerate(enc.highways):
            w, b = te[f"highways._layers.{k}.weight"], te[f"highways._layers.{k}.bias"]
            highway.linear.weight.copy_(torch.cat([w[:F], -w[F:]]))
            highway.linear.bias.copy_(torch.cat([b[:F], -b[F:]]))
        enc.projection.weight.copy_(te["projection.weight"])
        enc.projection.bias.copy_(te["projection.bias"])
        for index, layer in enumerate(model.layers):
            for d, direction in enumerate(("forward", "backward")):
                prefix = f"{direction}_layer_{index}"
                layer.weight_ih[d].copy_(encoder[f"{prefix}.input_linearity.weight"])
                layer.weight_hh[d].copy_(encoder[f"{prefix}.state_linearity.weight"])
                layer.bias[d].copy_(encoder[f"{prefix}.state_linearity.bias"])
                layer.weight_proj[d].copy_(encoder[f"{prefix}.state_projection.weight"])


def state_dicts(model) -> Tuple["OrderedDict[str, torch.Tensor]", "OrderedDict[str, torch.Tensor]"]:
    """The reference's two state dicts of ``model`` (exact copies)."""
    enc = model.token_encoder
    F = model.options.n_filters
    c = lambda x: x.detach().float().cpu().clone().contiguous()  # noqa: E731
    te: "OrderedDict[str, torch.Tensor]" = OrderedDict()
    if enc.word_embedding is not None:
        te["word_emb_layer.embedding.weight"] = c(enc.word_embedding.weight[1:])
    te["char_emb_layer.embedding.weight"] = c(enc.char_embedding.weight[1:])
    for i, conv in enumerate(enc.convs):
        te[f"convolutions.{i}.weight"] = c(conv.weight)
        te[f"convolutions.{i}.bias"] = c(conv.bias)
    for k, highway in enumerate(enc.highways):
        w, b = c(highway.linear.weight), c(highway.linear.bias)
        te[f"highways._layers.{k}.weight"] = torch.cat([w[:F], -w[F:]])
        te[f"highways._layers.{k}.bias"] = torch.cat([b[:F], -b[F:]])
    te["projection.weight"] = c(enc.projection.weight)
    te["projection.bias"] = c(enc.projection.bias)
    en: "OrderedDict[str, torch.Tensor]" = OrderedDict()
    for index, layer in enumerate(model.layers):
        for d, direction in enumerate(("forward", "backward")):
            prefix = f"{direction}_layer_{index}"
            en[f"{prefix}.input_linearity.weight"] = c(layer.weight_ih[d])
            en[f"{prefix}.state_linearity.weight"] = c(layer.weight_hh[d])
            en[f"{prefix}.state_linearity.bias"] = c(layer.bias[d])
            en[f"{prefix}.state_projection.weight"] = c(layer.weight_proj[d])
    return te, en


ARCHITECTURE_FILE = "architecture.json"


def save(model, path: PathLike) -> Path:
    """Write ``model`` (an ELMoForManyLangs biLM) as a model directory that
    the reference package and :func:`load` read."""
    if model.vocabulary is None:
        raise ValueError("this biLM is a bilm-tf model: write it with BiLM.to_hdf5 (weights.hdf5 + options.json)")
    folder = Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    kept = model.options.extra.get(FAMILY_EFML, {}) if isinstance(model.options.extra, dict) else {}
    config = json.loads(json.dumps(kept.get("config", {}))) if isinstance(kept.get("config"), dict) else {}
    config["config_path"] = ARCHITECTURE_FILE
    (folder / ARCHITECTURE_FILE).write_text(json.dumps(architecture(model.options), indent=2) + "\n", encoding="utf-8")
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    write_dic(model.vocabulary.chars, folder / "char.dic")
    if model.vocabulary.words is not None:
        write_dic(model.vocabulary.words, folder / "word.dic")
    te, en = state_dicts(model)
    torch.save(te, folder / "token_embedder.pkl")
    torch.save(en, folder / "encoder.pkl")
    return folder


# ------------------------------------------------- inside a saved pipeline
def to_fields(model) -> Dict[str, Any]:
    """What a saved spaCy pipeline stores of an ELMoForManyLangs biLM
    (msgpack-able: hdf5 bytes of both state dicts under ``token_embedder/``
    and ``encoder/``, the vocabularies as ``[token, id]`` lists)."""
    import io

    import h5py

    te, en = state_dicts(model)
    buffer = io.BytesIO()
    with h5py.File(buffer, "w") as out:
        for group, table in (("token_embedder", te), ("encoder", en)):
            for key, tensor in table.items():
                out.create_dataset(f"{group}/{key}", data=tensor.numpy())
    vocabulary = model.vocabulary
    return {
        "weights": buffer.getvalue(),
        "vocabulary": {
            "chars": [[token, index] for token, index in vocabulary.chars.items()],
            "words": None if vocabulary.words is None else [[t, i] for t, i in vocabulary.words.items()],
        },
    }


def from_fields(options: BiLMOptions, msg: Dict[str, Any], where: str, **kwargs) -> "BiLM":
    """The biLM of :func:`to_fields`' fields, every tensor shape-checked
    against ``options`` (already validated) before the model is allocated."""
    import io

    import h5py

    if not isinstance(msg.get("weights"), bytes):
        raise EfmlFormatError(f"{where} holds no weights (field 'weights' is missing or not bytes)")
    vocab = msg.get("vocabulary")
    if not isinstance(vocab, dict):
        raise EfmlFormatError(f"{where} holds no vocabulary (field 'vocabulary')")
    tables: Dict[str, Optional[Dict[str, int]]] = {}
    for name in ("chars", "words"):
        entries = vocab.get(name)
        if entries is None and name == "words":
            tables[name] = None
            continue
        if not isinstance(entries, list) or not all(
            isinstance(e, (list, tuple))
            and len(e) == 2
            and isinstance(e[0], str)
            and isinstance(e[1], int)
            and not isinstance(e[1], bool)
            for e in entries
        ):
            raise EfmlFormatError(f"{where}: vocabulary.{name} must be a list of [token, id] pairs")
        tables[name] = {token: index for token, index in entries}
    expected_te, expected_en = expected_shapes(options)
    te: Dict[str, torch.Tensor] = {}
    en: Dict[str, torch.Tensor] = {}
    try:
        with h5py.File(io.BytesIO(msg["weights"]), "r") as fin:
            for group, expected, table in (("token_embedder", expected_te, te), ("encoder", expected_en, en)):
                if group not in fin:
                    raise EfmlFormatError(f"{where}: the weights lack the group {group!r}")
                for key in fin[group]:
                    data = fin[group][key]
                    if not hasattr(data, "shape") or key not in expected or tuple(data.shape) != expected[key]:
                        raise EfmlFormatError(
                            f"{where}: {group}/{key} is not one of the {len(expected)} tensors the options call for "
                            "(or has another shape)"
                        )
                    if data.dtype.kind != "f":
                        raise EfmlFormatError(f"{where}: {group}/{key} holds {data.dtype} values, expected float32")
                    tensor = torch.from_numpy(data[...].astype("float32"))
                    if not torch.isfinite(tensor).all():
                        raise EfmlFormatError(f"{where}: {group}/{key} holds NaN or infinite values")
                    table[key] = tensor
    except OSError as err:
        raise EfmlFormatError(f"{where}: the weights are not readable hdf5 ({err})") from None
    check_shapes(options, te, en, {"token_embedder": f"{where} token_embedder", "encoder": f"{where} encoder"})
    return build(options, tables["chars"], tables["words"], te, en, where=where, **kwargs)
