"""ELMoForManyLangs architectures: where a model directory's architecture
JSON is found (or how it is inferred), its options, and the tensor shapes
they call for. The choices are named in :mod:`.efml`."""
import json
import logging
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import torch

from ..options import FAMILY_EFML, BiLMOptions, OptionsError
from .efml_files import EfmlFormatError, read_json

logger = logging.getLogger("spacy_elmo")

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
            return read_json(candidate), str(candidate.name)
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

    filters: List[List[int]] = []
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
        raise EfmlFormatError(
            f"{where}: encoder {encoder.get('name')!r} is not supported (only 'elmo', the published models')"
        )
    if str(embedder.get("name", "")).lower() != "cnn":
        raise EfmlFormatError(
            f"{where}: token_embedder {embedder.get('name')!r} is not supported (only 'cnn', the published models')"
        )
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
    for (name, table), expected in zip(
        (("token_embedder", token_embedder), ("encoder", encoder)), expected_shapes(options)
    ):
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
