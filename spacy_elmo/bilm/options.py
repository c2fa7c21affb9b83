"""The options JSON of the published biLM format, parsed and validated.

The file is bilm-tf's: a ``char_cnn`` block and an ``lstm`` block. Keys this
package does not use (bilm-tf's training settings such as ``n_tokens_vocab``
or ``unroll_steps``) are kept and written back unchanged on export.
"""
import copy
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union

from .chars import MAX_CHARS, N_CHARACTERS

ACTIVATIONS = ("relu", "tanh")


class OptionsError(ValueError):
    """The options JSON is missing a field or holds a value we cannot use."""


def _get(block: Dict[str, Any], path: str, name: str, kind, default=...):
    """Read ``block[name]`` as ``kind``; a missing or null field takes ``default``."""
    value = block.get(name)
    if value is None:
        if default is ...:
            raise OptionsError(f"options: missing field '{path}{name}'")
        return default
    if kind is int and isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise OptionsError(
            f"options: field '{path}{name}' must be {kind.__name__}, found {value!r}"
        )
    return value


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

    def __post_init__(self) -> None:
        self.filters = [tuple(f) for f in self.filters]  # type: ignore[misc]
        problems = []
        for name in ("char_embedding_dim", "lstm_dim", "projection_dim", "n_layers"):
            if getattr(self, name) < 1:
                problems.append(f"{name} must be >= 1, found {getattr(self, name)}")
        if self.n_highway < 0:
            problems.append(f"n_highway must be >= 0, found {self.n_highway}")
        if not self.filters:
            problems.append("char_cnn.filters must not be empty")
        for width, num in self.filters:
            if width < 1 or num < 1:
                problems.append(f"filter [{width}, {num}] must have width and count >= 1")
            if width > self.max_characters_per_token:
                problems.append(
                    f"filter width {width} exceeds max_characters_per_token "
                    f"{self.max_characters_per_token}"
                )
        if self.activation not in ACTIVATIONS:
            problems.append(f"char_cnn.activation must be one of {ACTIVATIONS}, found {self.activation!r}")
        if self.n_characters not in (261, 262):
            problems.append(f"char_cnn.n_characters must be 261 or 262, found {self.n_characters}")
        for name in ("cell_clip", "proj_clip"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                problems.append(f"lstm.{name} must be > 0 or absent, found {value}")
        if problems:
            raise OptionsError("invalid options: " + "; ".join(problems))

    @property
    def n_filters(self) -> int:
        return sum(num for _, num in self.filters)

    @property
    def output_dim(self) -> int:
        """Width of every output layer: forward and backward halves."""
        return 2 * self.projection_dim

    @property
    def has_projection(self) -> bool:
        """bilm-tf projects the CNN output only when its width differs."""
        return self.n_filters != self.projection_dim

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "BiLMOptions":
        if not isinstance(data, dict):
            raise OptionsError(f"options must be a JSON object, found {type(data).__name__}")
        extra = copy.deepcopy(data)
        cnn = _get(data, "", "char_cnn", dict)
        lstm = _get(data, "", "lstm", dict)
        filters = _get(cnn, "char_cnn.", "filters", list)
        for f in filters:
            if not (isinstance(f, (list, tuple)) and len(f) == 2 and all(isinstance(v, int) for v in f)):
                raise OptionsError(f"options: char_cnn.filters entries must be [width, count], found {f!r}")
        embedding = _get(cnn, "char_cnn.", "embedding", dict)
        clip = {}
        for name in ("cell_clip", "proj_clip"):
            value = lstm.get(name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
                raise OptionsError(f"options: field 'lstm.{name}' must be a number, found {value!r}")
            clip[name] = None if value is None else float(value)
        options = cls(
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
        return options

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

    @classmethod
    def from_file(cls, path: Union[str, Path]) -> "BiLMOptions":
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise OptionsError(f"options file not found: {path}") from None
        except UnicodeDecodeError as err:
            raise OptionsError(f"options file {path} is not UTF-8 JSON: {err}") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise OptionsError(f"options file {path} is not valid JSON: {err}") from None
        return cls.from_dict(data)

    def to_file(self, path: Union[str, Path]) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2) + "\n", encoding="utf-8")
