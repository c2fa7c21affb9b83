"""What is trained: the inference biLM plus one softmax shared by both
directions, and the biLM options a run starts from."""
from pathlib import Path
from typing import Any, Dict, Optional, Sequence, Tuple

import torch
from torch import nn

from ..bilm.model import BiLM
from ..bilm.options import BiLMOptions
from .config import PretrainConfig
from .grow import check_growth
from .lm_head import LMHead


class PretrainModel(nn.Module):
    """BiLM + shared softmax; ``forward`` returns the summed NLL of each
    direction and the number of targets per direction."""

    def __init__(
        self, options: BiLMOptions, vocab_size: int, dropout: float = 0.1, cutoffs: Optional[Sequence[int]] = None
    ) -> None:
        super().__init__()
        self.bilm = BiLM(options, dropout=dropout)
        self.head = LMHead(options.projection_dim, vocab_size, cutoffs)
        self.output_dropout = dropout

    def top_layer(self, char_ids: torch.Tensor) -> torch.Tensor:
        top = self.bilm(char_ids).layers[-1]
        return nn.functional.dropout(top, self.output_dropout, self.training)

    def forward(self, char_ids: torch.Tensor, targets: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, int]:
        return self.head(self.top_layer(char_ids), targets)


def load_options(config: PretrainConfig, resumed: Optional[Dict[str, Any]] = None) -> BiLMOptions:
    """The biLM's options: those of ``--init``'s model (or ``--options``
    that widen its projection: :mod:`.grow`), a published shape, or an
    options file. ``resumed``: the options of the checkpoint a run resumes
    from, used when its ``--init`` directory is gone (the checkpoint holds
    the weights; ``--init`` mattered only at the start)."""
    if config.init is not None:
        init_file = Path(config.init) / "options.json"
        if resumed is not None and not init_file.is_file():
            return BiLMOptions.from_file(config.options) if config.options else BiLMOptions.from_dict(resumed)
        init_options = BiLMOptions.from_file(init_file)
        if config.options is None:
            return init_options
        options = BiLMOptions.from_file(config.options)
        check_growth(init_options, options, f"--options {config.options} and the model in --init {config.init}")
        return options
    if config.shape is not None:
        from ..bilm.options import PUBLISHED_SHAPES, published_options

        if config.shape not in PUBLISHED_SHAPES:
            raise ValueError(f"shape must be one of {sorted(PUBLISHED_SHAPES)}, found {config.shape!r}")
        return published_options(config.shape)
    return BiLMOptions.from_file(config.options)  # type: ignore[arg-type]
