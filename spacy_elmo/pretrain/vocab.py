"""Word vocabulary for pretraining, in bilm-tf's text format (one word a line).

The first three lines are ``<S>``, ``</S>`` and ``<UNK>``; the words follow by
descending corpus frequency (ties in code-point order, so the file is a
deterministic function of the corpus). Frequency order is what the adaptive
softmax needs: its head cluster holds the first ids.
"""
from collections import Counter
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Union

BOS, EOS, UNK = "<S>", "</S>", "<UNK>"
SPECIALS = (BOS, EOS, UNK)


class Vocab:
    def __init__(self, words: Iterable[str]) -> None:
        words = list(words)
        if tuple(words[:3]) != SPECIALS:
            raise ValueError(f"a vocabulary must start with {', '.join(SPECIALS)}, found {words[:3]}")
        self.words: List[str] = words
        self.index: Dict[str, int] = {}
        for i, word in enumerate(words):
            if not word or any(c.isspace() for c in word):
                raise ValueError(f"vocabulary entry {i + 1} is empty or holds whitespace: {word!r}")
            if word in self.index:
                raise ValueError(f"vocabulary entry {i + 1} repeats {word!r}")
            self.index[word] = i

    bos_id, eos_id, unk_id = 0, 1, 2

    def __len__(self) -> int:
        return len(self.words)

    def __contains__(self, word: str) -> bool:
        return word in self.index

    def get(self, word: str) -> int:
        return self.index.get(word, self.unk_id)

    @classmethod
    def build(cls, counts: Counter, max_size: Optional[int] = None, min_count: int = 1) -> "Vocab":
        """The ``max_size`` most frequent words (specials included in the size)
        that occur at least ``min_count`` times."""
        if max_size is not None and max_size < 4:
            raise ValueError(f"vocab size must be at least 4 (3 specials + a word), found {max_size}")
        items = [
            (w, c)
            for w, c in counts.items()
            if c >= min_count and w not in SPECIALS and w and not any(ch.isspace() for ch in w)
        ]
        items.sort(key=lambda wc: (-wc[1], wc[0]))
        if max_size is not None:
            items = items[: max_size - len(SPECIALS)]
        return cls(list(SPECIALS) + [w for w, _ in items])

    def to_file(self, path: Union[str, Path]) -> None:
        Path(path).write_text("".join(w + "\n" for w in self.words), encoding="utf-8")

    @classmethod
    def from_file(cls, path: Union[str, Path]) -> "Vocab":
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ValueError(f"vocabulary file not found: {path}") from None
        except UnicodeDecodeError as err:
            raise ValueError(f"vocabulary file {path} is not UTF-8: {err}") from None
        words = [line for line in text.split("\n") if line != ""]
        try:
            return cls(words)
        except ValueError as err:
            raise ValueError(f"vocabulary file {path}: {err}") from None
