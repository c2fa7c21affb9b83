"""The ELMo character-id scheme: the one home of how a token becomes ids.

A token is encoded as ``max_chars`` (50) integers:

* ids 0..255 are the bytes of the token's UTF-8 encoding, cut to
  ``max_chars - 2`` (48) bytes (a cut may split a multi-byte character, as in
  the reference);
* 256 marks sentence start, 257 sentence end, 258 word start, 259 word end and
  260 in-word padding;
* every id is shifted by +1, so that 0 means "no token" (a padded position of
  a batch) and row 0 of the character embedding is a constant zero.

A token reads ``[258, b_1, ..., b_n, 259, 260, 260, ...]`` (+1). The sentence
boundary tokens ``<S>`` and ``</S>`` read ``[258, 256, 259, 260, ...]`` and
``[258, 257, 259, 260, ...]`` (+1); they wrap every sentence before the
char-CNN and are removed from the outputs.

Choices:

* Characters that cannot be encoded in UTF-8 (lone surrogates) are dropped, as
  the reference's ``encode('utf-8', 'ignore')`` does.
* A token whose text is literally ``<S>`` or ``</S>`` is encoded from its bytes
  like any other word; only the boundaries this module adds are special.
"""
from functools import lru_cache
from typing import Sequence, Tuple

import numpy

MAX_CHARS = 50
BOS_CHAR = 256
EOS_CHAR = 257
BOW_CHAR = 258
EOW_CHAR = 259
PAD_CHAR = 260
#: Rows of the character embedding, the "no token" row 0 included.
N_CHARACTERS = 262


def _make_ids(payload: Sequence[int], max_chars: int) -> numpy.ndarray:
    ids = numpy.full(max_chars, PAD_CHAR, dtype=numpy.int64)
    ids[0] = BOW_CHAR
    ids[1 : len(payload) + 1] = payload
    ids[len(payload) + 1] = EOW_CHAR
    ids += 1
    ids.setflags(write=False)
    return ids


def _check_max_chars(max_chars: int) -> None:
    if max_chars < 3:
        raise ValueError(f"max_characters_per_token must be at least 3, found {max_chars}")


@lru_cache(maxsize=2 ** 16)
def token_char_ids(token: str, max_chars: int = MAX_CHARS) -> numpy.ndarray:
    """Return the (read-only) ``max_chars`` ids of one token, +1 scheme."""
    _check_max_chars(max_chars)
    payload = token.encode("utf-8", "ignore")[: max_chars - 2]
    return _make_ids(list(payload), max_chars)


@lru_cache(maxsize=8)
def boundary_char_ids(max_chars: int = MAX_CHARS) -> Tuple[numpy.ndarray, numpy.ndarray]:
    """Return the ids of the sentence start and end tokens."""
    _check_max_chars(max_chars)
    return _make_ids([BOS_CHAR], max_chars), _make_ids([EOS_CHAR], max_chars)


def batch_to_char_ids(
    sentences: Sequence[Sequence[str]],
    max_chars: int = MAX_CHARS,
    add_boundaries: bool = True,
) -> Tuple[numpy.ndarray, numpy.ndarray]:
    """Encode a batch of tokenised sentences.

    Returns ``(char_ids, lengths)``: ``char_ids`` is int64 of shape
    ``(n_sentences, max_len, max_chars)`` with zero rows for padded positions,
    ``lengths`` the number of positions per row (boundaries included when
    ``add_boundaries``).
    """
    lengths = numpy.array(
        [len(s) + (2 if add_boundaries else 0) for s in sentences], dtype=numpy.int64
    )
    width = int(lengths.max()) if len(sentences) else 0
    out = numpy.zeros((len(sentences), width, max_chars), dtype=numpy.int64)
    bos, eos = boundary_char_ids(max_chars)
    offset = 1 if add_boundaries else 0
    for row, sentence in enumerate(sentences):
        if add_boundaries:
            out[row, 0] = bos
            out[row, len(sentence) + 1] = eos
        for i, token in enumerate(sentence):
            if not isinstance(token, str):
                raise TypeError(
                    f"tokens must be str, found {type(token).__name__} in sentence {row}"
                )
            out[row, i + offset] = token_char_ids(token, max_chars)
    return out, lengths

