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
from typing import Any, Dict, List, Optional, Tuple, Union

import torch

from ..chars import CharVocabulary
from ..options import FAMILY_EFML, BiLMOptions, OptionsError

logger = logging.getLogger("spacy_elmo")

PathLike = Union[str, Path]

#: Largest ``.pkl`` file read (the published encoder.pkl is about 300 MB).
MAX_PKL_BYTES = 4 << 30
#: Largest ``.dic`` file read (published word.dic: a few MB).
MAX_DIC_BYTES = 256 << 20
#: Largest JSON file read (a config is about 1 KB).
MAX_JSON_BYTES = 1 << 20

FILES = ("config.json", "char.dic", "word.dic", "token_embedder.pkl", "encoder.pkl")

_SAMPLE = {
    "encoder": {"name": "elmo", "projection_dim": 512, "cell_clip": 3, "proj_clip": 3, "dim": 4096, "n_layers": 2},
    "token_embedder": {
        "name": "cnn",
        "activation": "relu",
        "filters": [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]],
        "n_highway": 2,
        "word_dim": 100,
        "char_dim": 50,
        "max_characters_per_token": 50,
    },
    "dropout": 0.1,
}
#: The architectures the reference package ships (``elmoformanylangs/configs``),
#: by file name; both files hold the same values (word_dim 100, char_dim 50).
REFERENCE_ARCHITECTURES: Dict[str, Dict[str, Any]] = {
    "cnn_50_100_512_4096_sample.json": _SAMPLE,
    "cnn_0_100_512_4096_sample.json": _SAMPLE,
}
#: Values the shapes do not show, taken when the architecture is inferred.
INFERRED_DEFAULTS = {"cell_clip": 3, "proj_clip": 3, "activation": "relu", "max_characters_per_token": 50}


class EfmlFormatError(ValueError):
    """An ELMoForManyLangs model directory that is incomplete, malformed, or
    does not match its architecture."""


# ---------------------------------------------------------------- detection
def is_model_dir(path: object) -> bool:
    """Whether ``path`` is a directory in this layout (``config.json`` and
    ``encoder.pkl``)."""
    if not isinstance(path, (str, Path)):
        return False
    path = Path(path)
    return path.is_dir() and (path / "config.json").is_file() and (path / "encoder.pkl").is_file()


# ------------------------------------------------------------------ reading
def _read_bounded(path: Path, limit: int, what: str) -> bytes:
    if not path.is_file():
        raise EfmlFormatError(
            f"{path.parent}: no {path.name} ({what}); an ELMoForManyLangs model directory holds "
            f"{', '.join(FILES)}"
        )
    size = path.stat().st_size
    if size > limit:
        raise EfmlFormatError(f"{path} is {size:,} bytes, more than the {limit:,} a {what} may have")
    return path.read_bytes()


def _read_json(path: Path) -> Dict[str, Any]:
    raw = _read_bounded(path, MAX_JSON_BYTES, "JSON file")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as err:
        raise EfmlFormatError(f"{path} is not UTF-8 JSON: {err}") from None
    if not isinstance(data, dict):
        raise EfmlFormatError(f"{path} holds a JSON {type(data).__name__}, expected an object")
    return data


def read_dic(path: PathLike) -> Dict[str, int]:
    """A ``.dic`` file as the reference reads it (see the module docstring)."""
    path = Path(path)
    raw = _read_bounded(path, MAX_DIC_BYTES, "vocabulary (.dic)")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise EfmlFormatError(f"{path} is not UTF-8 text: {err}") from None
    table: Dict[str, int] = {}
    for number, line in enumerate(text.split("\n"), start=1):
        fields = line.strip().split("\t")
        if fields == [""]:
            continue
        if len(fields) == 1:
            fields.insert(0, "\u3000")
        if len(fields) != 2:
            raise EfmlFormatError(f"{path}, line {number}: expected 'token<TAB>id', found {len(fields)} tab-separated fields")
        token, index = fields
        try:
            table[token] = int(index)
        except ValueError:
            raise EfmlFormatError(f"{path}, line {number}: the id {index!r} is not an integer") from None
    if not table:
        raise EfmlFormatError(f"{path} holds no entries")
    return table


def load_state_dict(path: PathLike) -> "OrderedDict[str, torch.Tensor]":
    """A ``.pkl`` state dict, read with ``weights_only=True``; only a map of
    names to finite floating-point tensors is accepted."""
    path = Path(path)
    if not path.is_file():
        _read_bounded(path, MAX_PKL_BYTES, "state dict (.pkl)")  # raises: names the missing file
    size = path.stat().st_size
    if size > MAX_PKL_BYTES:
        raise EfmlFormatError(f"{path} is {size:,} bytes, more than the {MAX_PKL_BYTES:,} a state dict may have")
    try:
        data = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as err:  # UnpicklingError, RuntimeError, EOFError, ... from a bad or hostile file
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise EfmlFormatError(
            f"{path} is not a PyTorch state dict of tensors ({type(err).__name__}: {first[:300]}). It was read "
            "with torch.load(weights_only=True), which refuses pickles that build objects or run code; "
            "nothing from it was executed. Re-download the model, or re-save its state dicts of tensors."
        ) from None
    if not isinstance(data, dict):
        raise EfmlFormatError(f"{path} holds a {type(data).__name__}, expected a state dict (names -> tensors)")
    out: "OrderedDict[str, torch.Tensor]" = OrderedDict()
    for key, value in data.items():
        if not isinstance(key, str) or not isinstance(value, torch.Tensor):
            raise EfmlFormatError(f"{path}: entry {key!r} is a {type(value).__name__}, expected a tensor")
        if not value.is_floating_point():
            raise EfmlFormatError(f"{path}: tensor {key!r} holds {value.dtype} values, expected floating point")
        value = value.float()
        if not torch.isfinite(value).all():
            raise EfmlFormatError(f"{path}: tensor {key!r} holds NaN or infinite values")
        out[key] = value
    return out


# ------------------------------------------------------------- architecture
def find_architecture(folder: Path, config: Dict[str, Any]) -> Tuple[Optional[Dict[str, Any]], str]:
    """The architecture JSON named by ``config.json`` and where it came from
    (None, reason: not found; the caller infers it)."""
    named = config.get("config_path")
    if not isinstance(named, str) or not named.strip():
        return None, "config.json names no config_path"
    name = Path(named.replace("\\", "/")).name
    candidates = []
    relative = Path(named)
    if not relative.is_absolute() and ".." not in relative.parts:
        candidates.append(folder / relative)
    candidates.append(folder / name)
    for candidate in candidates:
        if candidate.is_file():
            return _read_json(candidate), str(candidate.name)
    if name in REFERENCE_ARCHITECTURES:
        logger.info("%s: %s is not in the model directory; using the reference package's %s", folder, named, name)
        return json.loads(json.dumps(REFERENCE_ARCHITECTURES[name])), f"the reference package's {name}"
    return None, f"{named} is neither in the model directory nor one of the reference package's configurations"


def infer_architecture(token_embedder: Dict[str, torch.Tensor], encoder: Dict[str, torch.Tensor]) -> Dict[str, Any]:
    """An architecture JSON that fits the state dicts' shapes (the values
    shapes do not show: :data:`INFERRED_DEFAULTS`)."""

    def shape(table, key, where):
        if key not in table:
            raise EfmlFormatError(f"cannot infer the architecture: {where} has no tensor {key!r}")
        return tuple(table[key].shape)

    filters = []
    while f"convolutions.{len(filters)}.weight" in token_embedder:
        num, _, width = shape(token_embedder, f"convolutions.{len(filters)}.weight", "token_embedder.pkl")
        filters.append([width, num])
    n_highway = 0
    while f"highways._layers.{n_highway}.weight" in token_embedder:
        n_highway += 1
    char_rows, char_dim = shape(token_embedder, "char_emb_layer.embedding.weight", "token_embedder.pkl")
    word_dim = (
        shape(token_embedder, "word_emb_layer.embedding.weight", "token_embedder.pkl")[1]
        if "word_emb_layer.embedding.weight" in token_embedder
        else 0
    )
    projection_dim = shape(token_embedder, "projection.weight", "token_embedder.pkl")[0]
    n_layers = 0
    while f"forward_layer_{n_layers}.state_projection.weight" in encoder:
        n_layers += 1
    if not n_layers:
        raise EfmlFormatError("cannot infer the architecture: encoder.pkl has no forward_layer_0")
    cell = shape(encoder, "forward_layer_0.state_projection.weight", "encoder.pkl")[1]
    return {
        "encoder": {
            "name": "elmo",
            "projection_dim": projection_dim,
            "cell_clip": INFERRED_DEFAULTS["cell_clip"],
            "proj_clip": INFERRED_DEFAULTS["proj_clip"],
            "dim": cell,
            "n_layers": n_layers,
        },
        "token_embedder": {
            "name": "cnn",
            "activation": INFERRED_DEFAULTS["activation"],
            "filters": filters,
            "n_highway": n_highway,
            "word_dim": word_dim,
            "char_dim": char_dim,
            "max_characters_per_token": INFERRED_DEFAULTS["max_characters_per_token"],
        },
    }


def _number(block: Dict[str, Any], key: str, where: str, kind=int, default=...):
    value = block.get(key, default)
    if value is ...:
        raise EfmlFormatError(f"{where}: missing field {key!r}")
    if kind is int and isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, (int,) if kind is int else (int, float)):
        raise EfmlFormatError(f"{where}: field {key!r} must be a number, found {value!r}")
    return value


def options_from_architecture(
    arch: Dict[str, Any], where: str, n_characters: int, n_words: int
) -> BiLMOptions:
    """:class:`BiLMOptions` of an architecture JSON (its ``encoder`` and
    ``token_embedder`` blocks) with the vocabulary sizes of the state dicts."""
    encoder, embedder = arch.get("encoder"), arch.get("token_embedder")
    if not isinstance(encoder, dict) or not isinstance(embedder, dict):
        raise EfmlFormatError(f"{where}: expected 'encoder' and 'token_embedder' objects")
    if str(encoder.get("name", "")).lower() != "elmo":
        raise EfmlFormatError(f"{where}: encoder {encoder.get('name')!r} is not supported (only 'elmo', the published models')")
    if str(embedder.get("name", "")).lower() != "cnn":
        raise EfmlFormatError(f"{where}: token_embedder {embedder.get('name')!r} is not supported (only 'cnn', the published models')")
    char_dim = _number(embedder, "char_dim", where)
    if char_dim <= 0:
        raise EfmlFormatError(f"{where}: char_dim {char_dim}: models without characters are not supported")
    word_dim = _number(embedder, "word_dim", where, default=0)
    clips = {}
    for key in ("cell_clip", "proj_clip"):
        value = _number(encoder, key, where, float, default=None) if encoder.get(key) is not None else None
        clips[key] = None if not value else float(value)  # the reference: 0 or absent = no clipping
    filters = embedder.get("filters")
    if not isinstance(filters, list):
        raise EfmlFormatError(f"{where}: token_embedder.filters must be a list of [width, count]")
    try:
        return BiLMOptions(
            family=FAMILY_EFML,
            char_embedding_dim=char_dim,
            filters=[tuple(f) if isinstance(f, list) else f for f in filters],
            n_highway=_number(embedder, "n_highway", where),
            activation=embedder.get("activation", "relu"),
            max_characters_per_token=_number(embedder, "max_characters_per_token", where),
            n_characters=n_characters,
            lstm_dim=_number(encoder, "dim", where),
            projection_dim=_number(encoder, "projection_dim", where),
            n_layers=_number(encoder, "n_layers", where),
            cell_clip=clips["cell_clip"],
            proj_clip=clips["proj_clip"],
            use_skip_connections=True,
            word_embedding_dim=word_dim,
            n_words=n_words if word_dim else 0,
        )
    except OptionsError as err:
        raise EfmlFormatError(f"{where}: {err}") from None


def expected_shapes(options: BiLMOptions) -> Tuple[Dict[str, Tuple[int, ...]], Dict[str, Tuple[int, ...]]]:
    """Every tensor of ``token_embedder.pkl`` and ``encoder.pkl`` with its shape."""
    o = options
    embedder: Dict[str, Tuple[int, ...]] = {}
    if o.word_embedding_dim:
        embedder["word_emb_layer.embedding.weight"] = (o.n_words, o.word_embedding_dim)
    embedder["char_emb_layer.embedding.weight"] = (o.n_characters, o.char_embedding_dim)
    for i, (width, num) in enumerate(o.filters):
        embedder[f"convolutions.{i}.weight"] = (num, o.char_embedding_dim, width)
        embedder[f"convolutions.{i}.bias"] = (num,)
    F = o.n_filters
    for k in range(o.n_highway):
        embedder[f"highways._layers.{k}.weight"] = (2 * F, F)
        embedder[f"highways._layers.{k}.bias"] = (2 * F,)
    embedder["projection.weight"] = (o.projection_dim, o.word_embedding_dim + F)
    embedder["projection.bias"] = (o.projection_dim,)
    encoder: Dict[str, Tuple[int, ...]] = {}
    C, P = o.lstm_dim, o.projection_dim
    for layer in range(o.n_layers):
        for direction in ("forward", "backward"):
            prefix = f"{direction}_layer_{layer}"
            encoder[f"{prefix}.input_linearity.weight"] = (4 * C, P)
            encoder[f"{prefix}.state_linearity.weight"] = (4 * C, P)
            encoder[f"{prefix}.state_linearity.bias"] = (4 * C,)
            encoder[f"{prefix}.state_projection.weight"] = (P, C)
    return embedder, encoder


def check_shapes(options: BiLMOptions, token_embedder, encoder, where: Dict[str, str]) -> None:
    """Raise :class:`EfmlFormatError` naming each missing, extra or
    mis-shaped tensor."""
    problems: List[str] = []
    for (name, table), expected in zip((("token_embedder", token_embedder), ("encoder", encoder)), expected_shapes(options)):
        for key, shape in expected.items():
            if key not in table:
                problems.append(f"{where[name]}: missing tensor {key!r} (expected shape {shape})")
            elif tuple(table[key].shape) != shape:
                problems.append(f"{where[name]}: tensor {key!r} has shape {tuple(table[key].shape)}, expected {shape}")
        for key in table:
            if key not in expected:
                problems.append(f"{where[name]}: unexpected tensor {key!r} (shape {tuple(table[key].shape)})")
    if problems:
        raise EfmlFormatError(
            "the weights do not match the architecture: " + "; ".join(problems[:8])
            + (f"; and {len(problems) - 8} more" if len(problems) > 8 else "")
        )


# ------------------------------------------------------------------ loading
def load(path: PathLike, **kwargs) -> "BiLM":  # noqa: F821
    """A :class:`~spacy_elmo.BiLM` from an ELMoForManyLangs model directory
    (``kwargs`` go to the BiLM: ``stateful``, ``token_cache_size``, ...)."""
    folder = Path(path)
    if not folder.is_dir():
        raise EfmlFormatError(f"{folder} is not a directory (an ELMoForManyLangs model is a directory of {', '.join(FILES)})")
    config = _read_json(folder / "config.json")
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


def build(options: BiLMOptions, chars, words, token_embedder, encoder, *, where: str = "the model", **kwargs) -> "BiLM":  # noqa: F821
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


def architecture(options: BiLMOptions) -> Dict[str, Any]:
    """The architecture JSON of ``options`` (the loaded one's other fields kept)."""
    kept = options.extra.get(FAMILY_EFML, {}).get("architecture", {}) if isinstance(options.extra, dict) else {}
    arch = json.loads(json.dumps(kept)) if isinstance(kept, dict) else {}
    encoder = arch.setdefault("encoder", {})
    encoder.update(
        name="elmo", projection_dim=options.projection_dim, dim=options.lstm_dim, n_layers=options.n_layers,
        cell_clip=_clip(options.cell_clip), proj_clip=_clip(options.proj_clip),
    )
    embedder = arch.setdefault("token_embedder", {})
    embedder.update(
        name="cnn", activation=options.activation, filters=[list(f) for f in options.filters],
        n_highway=options.n_highway, word_dim=options.word_embedding_dim, char_dim=options.char_embedding_dim,
        max_characters_per_token=options.max_characters_per_token,
    )
    return arch


def _clip(value: Optional[float]):
    if value is None:
        return 0
    return int(value) if float(value).is_integer() else value


def write_dic(table: Dict[str, int], path: Path) -> None:
    lines = [f"{token}\t{index}\n" for token, index in sorted(table.items(), key=lambda item: item[1])]
    path.write_text("".join(lines), encoding="utf-8")


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


def from_fields(options: BiLMOptions, msg: Dict[str, Any], where: str, **kwargs) -> "BiLM":  # noqa: F821
    """The biLM of :func:`to_fields`' fields, every tensor shape-checked
    against ``options`` (already validated) before the model is allocated."""
    import io

    import h5py

    if not isinstance(msg.get("weights"), bytes):
        raise EfmlFormatError(f"{where} holds no weights (field 'weights' is missing or not bytes)")
    vocab = msg.get("vocabulary")
    if not isinstance(vocab, dict):
        raise EfmlFormatError(f"{where} holds no vocabulary (field 'vocabulary')")
    tables = {}
    for name in ("chars", "words"):
        entries = vocab.get(name)
        if entries is None and name == "words":
            tables[name] = None
            continue
        if not isinstance(entries, list) or not all(
            isinstance(e, (list, tuple)) and len(e) == 2 and isinstance(e[0], str) and isinstance(e[1], int) and not isinstance(e[1], bool)
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
                            f"(or has another shape)"
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
