"""The options JSON of the published biLM format, parsed and validated.

The file is bilm-tf's: a ``char_cnn`` block and an ``lstm`` block. Keys this
package does not use (bilm-tf's training settings such as ``n_tokens_vocab``
or ``unroll_steps``) are kept and written back unchanged on export.

**Validation before allocation.** Every options object, however it is made
(``BiLMOptions(...)``, :meth:`BiLMOptions.from_dict`, an options file, or a
saved pipeline through ``spacy.load``/``from_bytes``), is checked before any
tensor is allocated: the type of every field, finiteness of the clips, the
bounds in :data:`LIMITS`, and the parameter count against
:data:`MAX_PARAMETERS`. A failure is one :class:`OptionsError` that names
each bad field by its JSON path (``lstm.dim``). The bounds cover every
published ELMo (small, medium, original, 5.5B) with a wide margin (the
largest published value in the comments below); they exist so that a
crafted or mistyped options file is refused at once instead of asking the
allocator for gigabytes (see docs/reliability.md).
"""
import copy
import json
import math
import numbers
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union

from .chars import MAX_CHARS, N_CHARACTERS
from .family import FAMILIES, FAMILY_BILM_TF, FAMILY_EFML, check_family_fields, write_family_fields  # noqa: F401

ACTIVATIONS = ("relu", "tanh")

#: Inclusive (min, max) of each integer field. Largest published value
#: (the original and 5.5B models) in the comment; every bound is 8x or more.
LIMITS: Dict[str, Tuple[int, int]] = {
    "char_embedding_dim": (1, 1024),  # 16
    "n_highway": (0, 16),  # 2
    "max_characters_per_token": (3, 1024),  # 50 (3: the word start and end marks + 1 byte)
    "lstm_dim": (1, 65_536),  # 4096
    "projection_dim": (1, 16_384),  # 512
    "n_layers": (1, 16),  # 2
}
#: At most this many filter widths (``char_cnn.filters`` entries; published: 7)...
MAX_FILTER_ENTRIES = 64
#: ... each at most this many filters (published: 1024) ...
MAX_FILTERS_PER_WIDTH = 16_384
#: ... and at most this many in all (published: 2048).
MAX_FILTERS_TOTAL = 65_536
#: Parameters of the biLM (4 GB in float32), about 10x the largest published
#: ELMo (the original and 5.5B shapes: 93.6 million).
MAX_PARAMETERS = 1_000_000_000

#: The JSON path of each field, for messages.
JSON_PATHS = {
    "char_embedding_dim": "char_cnn.embedding.dim",
    "filters": "char_cnn.filters",
    "n_highway": "char_cnn.n_highway",
    "activation": "char_cnn.activation",
    "max_characters_per_token": "char_cnn.max_characters_per_token",
    "n_characters": "char_cnn.n_characters",
    "lstm_dim": "lstm.dim",
    "projection_dim": "lstm.projection_dim",
    "n_layers": "lstm.n_layers",
    "cell_clip": "lstm.cell_clip",
    "proj_clip": "lstm.proj_clip",
    "use_skip_connections": "lstm.use_skip_connections",
    "family": "family",
    "word_embedding_dim": "word_embedding.dim",
    "n_words": "word_embedding.n_words",
}


class OptionsError(ValueError):
    """The options JSON is missing a field or holds a value we cannot use.

    ``fields``: the JSON paths of the offending fields (e.g. ``["lstm.dim"]``),
    where known."""

    def __init__(self, message: str, fields: Optional[List[str]] = None) -> None:
        super().__init__(message)
        self.fields = list(fields or [])


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _get(block: Dict[str, Any], path: str, name: str, kind, default=...):
    """Read ``block[name]`` as ``kind``; a missing or null field takes ``default``."""
    value = block.get(name)
    if value is None:
        if default is ...:
            raise OptionsError(f"options: missing field '{path}{name}'", [path + name])
        return default
    if kind is int and isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise OptionsError(
            f"options: field '{path}{name}' must be {kind.__name__}, found {value!r}", [path + name]
        )
    return value


def parameter_count(options: "BiLMOptions") -> int:
    """The number of parameters of a :class:`~spacy_elmo.BiLM` with these
    options, computed from the sizes alone (nothing is allocated)."""
    o = options
    F, P, C = o.n_filters, o.projection_dim, o.lstm_dim
    count = o.char_rows * o.char_embedding_dim
    count += (o.n_words + 1) * o.word_embedding_dim if o.word_embedding_dim else 0
    count += sum(width * o.char_embedding_dim * num + num for width, num in o.filters)
    count += o.n_highway * (F * 2 * F + 2 * F)
    if o.has_projection:
        count += (F + o.word_embedding_dim) * P + P
    # Per layer and direction: W_ih (4C x P), W_hh (4C x P), bias (4C), W_P (P x C).
    count += o.n_layers * 2 * (2 * 4 * C * P + 4 * C + P * C)
    return count


@dataclass
class BiLMOptions:
    """Sizes of a biLM. ``cell_clip``/``proj_clip`` of ``None`` mean no clipping."""

    char_embedding_dim: int = 16
    filters: List[Tuple[int, int]] = field(
        default_factory=lambda: [(1, 32), (2, 32), (3, 64), (4, 128), (5, 256), (6, 512), (7, 1024)]
    )
    n_highway: int = 2
    activation: str = "relu"
    max_characters_per_token: int = MAX_CHARS
    n_characters: int = N_CHARACTERS
    lstm_dim: int = 4096
    projection_dim: int = 512
    n_layers: int = 2
    cell_clip: Optional[float] = 3.0
    proj_clip: Optional[float] = 3.0
    use_skip_connections: bool = True
    extra: Dict[str, Any] = field(default_factory=dict)
    #: The model family (:mod:`.family`; ELMoForManyLangs: ``n_characters`` is
    #: the character vocabulary's size, and a word embedding may follow).
    family: str = FAMILY_BILM_TF
    word_embedding_dim: int = 0
    n_words: int = 0

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Check every field (types, finiteness, bounds, parameter count),
        as :class:`~spacy_elmo.BiLM` does again before it allocates anything
        (the fields may have been changed since); raise one
        :class:`OptionsError` naming the bad fields."""
        problems: List[str] = []
        bad: List[str] = []

        def problem(name: str, text: str) -> None:
            path = JSON_PATHS.get(name, name)
            problems.append(f"{path} {text}")
            if path not in bad:
                bad.append(path)

        for name, (low, high) in LIMITS.items():
            value = getattr(self, name)
            if not _is_int(value):
                problem(name, f"must be an integer, found {value!r}")
            elif not low <= value <= high:
                problem(name, f"must be in [{low}, {high}], found {value}")
            else:
                setattr(self, name, int(value))
        check_family_fields(self, problem, _is_int)
        if not isinstance(self.activation, str) or self.activation not in ACTIVATIONS:
            problem("activation", f"must be one of {ACTIVATIONS}, found {self.activation!r}")
        if not isinstance(self.use_skip_connections, bool):
            problem("use_skip_connections", f"must be true or false, found {self.use_skip_connections!r}")
        for name in ("cell_clip", "proj_clip"):
            value = getattr(self, name)
            if value is None:
                continue
            if not _is_real(value):
                problem(name, f"must be a number or absent, found {value!r}")
            elif not math.isfinite(value) or value <= 0:
                problem(name, f"must be a finite number > 0 or absent (no clipping), found {value}")
            else:
                setattr(self, name, float(value))
        if not isinstance(self.extra, dict):
            problem("extra", f"must be a dict, found {type(self.extra).__name__}")
        self._check_filters(problem)
        if problems:
            raise OptionsError("invalid options: " + "; ".join(problems), bad)
        count = parameter_count(self)
        if count > MAX_PARAMETERS:
            raise OptionsError(
                f"invalid options: the biLM would have {count:,} parameters, more than the limit of "
                f"{MAX_PARAMETERS:,} (about 10x the largest published ELMo); check lstm.dim, "
                "lstm.projection_dim, lstm.n_layers, char_cnn.filters and char_cnn.n_highway",
                ["lstm.dim", "lstm.projection_dim", "lstm.n_layers", "char_cnn.filters", "char_cnn.n_highway"],
            )

    def _check_filters(self, problem) -> None:
        filters = self.filters
        if not isinstance(filters, (list, tuple)):
            problem("filters", f"must be a list of [width, count] pairs, found {filters!r}")
            return
        if not filters:
            problem("filters", "must not be empty")
            return
        if len(filters) > MAX_FILTER_ENTRIES:
            problem("filters", f"must have at most {MAX_FILTER_ENTRIES} entries, found {len(filters)}")
            return
        checked = []
        for f in filters:
            if not (isinstance(f, (list, tuple)) and len(f) == 2 and all(_is_int(v) for v in f)):
                problem("filters", f"entries must be [width, count] integer pairs, found {f!r}")
                return
            width, num = int(f[0]), int(f[1])
            if width < 1 or num < 1:
                problem("filters", f"entry [{width}, {num}] must have width and count >= 1")
            elif num > MAX_FILTERS_PER_WIDTH:
                problem("filters", f"entry [{width}, {num}] has more than {MAX_FILTERS_PER_WIDTH} filters")
            elif _is_int(self.max_characters_per_token) and width > self.max_characters_per_token:
                problem(
                    "filters",
                    f"width {width} exceeds char_cnn.max_characters_per_token {self.max_characters_per_token}",
                )
            checked.append((width, num))
        total = sum(num for _, num in checked)
        if total > MAX_FILTERS_TOTAL:
            problem("filters", f"hold {total} filters in all, more than {MAX_FILTERS_TOTAL}")
        self.filters = checked

    @property
    def n_filters(self) -> int:
        return sum(num for _, num in self.filters)

    @property
    def output_dim(self) -> int:
        """Width of every output layer: forward and backward halves."""
        return 2 * self.projection_dim

    @property
    def has_projection(self) -> bool:
        """bilm-tf projects only when the CNN width differs; ELMoForManyLangs always."""
        return self.family == FAMILY_EFML or self.n_filters != self.projection_dim

    @property
    def char_rows(self) -> int:
        """Rows of the character embedding, the "no token" row 0 included."""
        return N_CHARACTERS if self.family == FAMILY_BILM_TF else self.n_characters + 1

    @property
    def forget_bias(self) -> float:
        """Added to the forget gate at run time: TensorFlow's 1.0 (bilm-tf), 0 (ELMoForManyLangs)."""
        return 1.0 if self.family == FAMILY_BILM_TF else 0.0

    @property
    def token_width(self) -> int:
        """Ids per token in the input: the characters (+ the word id, with a word embedding)."""
        return self.max_characters_per_token + (1 if self.word_embedding_dim else 0)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "BiLMOptions":
        if not isinstance(data, dict):
            raise OptionsError(f"options must be a JSON object, found {type(data).__name__}")
        extra = copy.deepcopy(data)
        cnn = _get(data, "", "char_cnn", dict)
        lstm = _get(data, "", "lstm", dict)
        filters = _get(cnn, "char_cnn.", "filters", list)
        for f in filters:
            if not (isinstance(f, (list, tuple)) and len(f) == 2 and all(_is_int(v) for v in f)):
                raise OptionsError(
                    f"options: char_cnn.filters entries must be [width, count], found {f!r}", ["char_cnn.filters"]
                )
        embedding = _get(cnn, "char_cnn.", "embedding", dict)
        clip = {}
        for name in ("cell_clip", "proj_clip"):
            value = lstm.get(name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
                raise OptionsError(f"options: field 'lstm.{name}' must be a number, found {value!r}", [f"lstm.{name}"])
            clip[name] = None if value is None else float(value)
        family = _get(data, "", "family", str, FAMILY_BILM_TF)
        words = _get(data, "", "word_embedding", dict, {}) if family == FAMILY_EFML else {}
        return cls(
            family=family,
            word_embedding_dim=_get(words, "word_embedding.", "dim", int, 0),
            n_words=_get(words, "word_embedding.", "n_words", int, 0),
            char_embedding_dim=_get(embedding, "char_cnn.embedding.", "dim", int),
            filters=[tuple(f) for f in filters],
            n_highway=_get(cnn, "char_cnn.", "n_highway", int, 0),
            activation=_get(cnn, "char_cnn.", "activation", str, "relu"),
            max_characters_per_token=_get(cnn, "char_cnn.", "max_characters_per_token", int, MAX_CHARS),
            n_characters=_get(cnn, "char_cnn.", "n_characters", int, N_CHARACTERS),
            lstm_dim=_get(lstm, "lstm.", "dim", int),
            projection_dim=_get(lstm, "lstm.", "projection_dim", int),
            n_layers=_get(lstm, "lstm.", "n_layers", int),
            cell_clip=clip["cell_clip"],
            proj_clip=clip["proj_clip"],
            use_skip_connections=_get(lstm, "lstm.", "use_skip_connections", bool, False),
            extra=extra,
        )

    def to_dict(self) -> Dict[str, Any]:
        data = copy.deepcopy(self.extra)
        cnn = data.setdefault("char_cnn", {})
        cnn["embedding"] = {**cnn.get("embedding", {}), "dim": self.char_embedding_dim}
        cnn.update(
            filters=[list(f) for f in self.filters],
            n_highway=self.n_highway,
            activation=self.activation,
            max_characters_per_token=self.max_characters_per_token,
            n_characters=N_CHARACTERS,
        )
        write_family_fields(self, data)
        lstm = data.setdefault("lstm", {})
        lstm.update(
            dim=self.lstm_dim,
            projection_dim=self.projection_dim,
            n_layers=self.n_layers,
            use_skip_connections=self.use_skip_connections,
        )
        for name in ("cell_clip", "proj_clip"):
            value = getattr(self, name)
            if value is None:
                lstm.pop(name, None)
            else:
                lstm[name] = int(value) if float(value).is_integer() else value
        return data

    #: An options file is about 500 bytes; larger files are refused unread.
    MAX_FILE_BYTES = 1 << 20

    @classmethod
    def from_file(cls, path: Union[str, Path]) -> "BiLMOptions":
        path = Path(path)
        if path.is_dir():
            raise OptionsError(f"options path {path} is a directory; give the options JSON file inside it")
        if path.exists() and not path.is_file():
            raise OptionsError(
                f"options path {path} is not a regular file (a device, FIFO or socket); give the options JSON file"
            )
        try:
            with open(path, "rb") as fin:
                raw = fin.read(cls.MAX_FILE_BYTES + 1)
        except FileNotFoundError:
            raise OptionsError(f"options file not found: {path}") from None
        except OSError as err:
            raise OptionsError(f"cannot read the options file {path}: {err.strerror or err}") from None
        if len(raw) > cls.MAX_FILE_BYTES:
            raise OptionsError(
                f"options file {path} is larger than {cls.MAX_FILE_BYTES} bytes; an options JSON is about "
                "500 bytes: is this the right file?"
            )
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise OptionsError(f"options file {path} is not UTF-8 JSON: {err}") from None
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, RecursionError) as err:
            raise OptionsError(f"options file {path} is not valid JSON: {err}") from None
        try:
            return cls.from_dict(data)
        except OptionsError as err:
            raise OptionsError(f"options file {path}: {err}", err.fields) from None

    def to_file(self, path: Union[str, Path]) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2) + "\n", encoding="utf-8")


_PUBLISHED_CNN = [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]]

#: The three published architectures (bilm-tf / AllenNLP): LSTM cell and
#: projection sizes and highway layers; all share the char-CNN above, 2 LSTM
#: layers, clipping at 3 and skip connections.
PUBLISHED_SHAPES: Dict[str, Dict[str, Any]] = {
    "small": {"lstm": (1024, 128), "n_highway": 1},
    "medium": {"lstm": (2048, 256), "n_highway": 1},
    "original": {"lstm": (4096, 512), "n_highway": 2},
}


def published_options(name: str) -> "BiLMOptions":
    """Options of a published shape: ``small``, ``medium`` or ``original``."""
    if name not in PUBLISHED_SHAPES:
        raise OptionsError(f"unknown published shape {name!r}: one of {sorted(PUBLISHED_SHAPES)}")
    shape = PUBLISHED_SHAPES[name]
    dim, proj = shape["lstm"]
    return BiLMOptions.from_dict(
        {
            "lstm": {
                "dim": dim,
                "projection_dim": proj,
                "n_layers": 2,
                "cell_clip": 3,
                "proj_clip": 3,
                "use_skip_connections": True,
            },
            "char_cnn": {
                "filters": _PUBLISHED_CNN,
                "n_highway": shape["n_highway"],
                "embedding": {"dim": 16},
                "activation": "relu",
                "n_characters": 262,
                "max_characters_per_token": 50,
            },
        }
    )
