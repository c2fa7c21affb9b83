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

Beside the byte scheme, :class:`CharVocabulary` is the scheme of the
ELMoForManyLangs family: ids from a per-model character vocabulary, with an
optional word id per token.
"""
from functools import lru_cache
from typing import Dict, Optional, Sequence, Tuple

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



# ------------------------------------------------------- character vocabulary
#: Entries a character vocabulary (ELMoForManyLangs ``char.dic``) must hold.
VOCAB_CHAR_SPECIALS = ("<bow>", "<eow>", "<oov>", "<pad>", "<bos>", "<eos>")
#: Entries a word vocabulary (``word.dic``) must hold.
VOCAB_WORD_SPECIALS = ("<oov>", "<pad>")
#: The sentence boundary words of the character-vocabulary scheme.
VOCAB_BOS, VOCAB_EOS = "<bos>", "<eos>"


class CharVocabulary:
    """The ELMoForManyLangs character-id scheme: a per-model vocabulary of
    Unicode characters (``char.dic``) and, optionally, of words
    (``word.dic``), beside the byte scheme above.

    A token's row holds ``max_chars`` character ids and, when the model has
    a word embedding, one more column: the word id. Every id is the
    vocabulary's id +1, so that 0 means "no token" as in the byte scheme
    (row 0 of the model's character and word embeddings is a constant zero
    that the vocabulary's own rows follow).

    What the reference (``elmoformanylangs`` 0.0.4, ``read_list`` and
    ``create_one_batch``) does, reproduced here because it changes outputs:

    * a token is cut to ``max_chars - 2`` code points (not bytes) before
      both its characters and its word are looked up, so a long token's word
      id is that of its prefix;
    * the first position holds the id of ``<eow>`` and the position after
      the last character the id of ``<bow>`` (the reference swaps the two
      names; the published models were trained that way);
    * the sentence boundaries are the words ``<bos>`` and ``<eos>``, read
      as ``[<eow>, <bos>, <bow>]``; a token whose text is ``<bos>`` or
      ``<eos>`` is read the same way (as in the reference);
    * characters and words not in the vocabulary take the id of ``<oov>``;
      positions after the word end hold ``<pad>``.
    """

    def __init__(self, chars: Dict[str, int], words: Optional[Dict[str, int]], max_chars: int = MAX_CHARS) -> None:
        _check_max_chars(max_chars)
        for name, table, specials in (("char", chars, VOCAB_CHAR_SPECIALS), ("word", words, VOCAB_WORD_SPECIALS)):
            if table is None:
                continue
            missing = [s for s in specials if s not in table]
            if missing:
                raise ValueError(f"the {name} vocabulary lacks the entries {', '.join(missing)}")
        self.chars = dict(chars)
        self.words = None if words is None else dict(words)
        self.max_chars = max_chars
        c = self.chars
        self._word_start, self._word_end = c["<eow>"] + 1, c["<bow>"] + 1
        self._char_oov, self._char_pad = c["<oov>"] + 1, c["<pad>"] + 1
        self._word_oov = None if self.words is None else self.words["<oov>"] + 1
        self._cache: Dict[str, numpy.ndarray] = {}

    @property
    def width(self) -> int:
        """Ids per token: ``max_chars``, +1 with a word vocabulary."""
        return self.max_chars + (0 if self.words is None else 1)

    @property
    def pad_id(self) -> int:
        """The (+1) id of in-word padding."""
        return self._char_pad

    def token_ids(self, token: str) -> numpy.ndarray:
        """The (read-only) ids of one token."""
        cached = self._cache.get(token)
        if cached is not None:
            return cached
        text = token[: self.max_chars - 2]
        ids = numpy.full(self.width, self._char_pad, dtype=numpy.int64)
        ids[0] = self._word_start
        if text in (VOCAB_BOS, VOCAB_EOS):
            ids[1] = self.chars[text] + 1
            ids[2] = self._word_end
        else:
            for k, char in enumerate(text):
                ids[k + 1] = self.chars.get(char, self._char_oov - 1) + 1
            ids[len(text) + 1] = self._word_end
        if self.words is not None:
            ids[-1] = self.words.get(text, self.words["<oov>"]) + 1
        ids.setflags(write=False)
        if len(self._cache) < 2 ** 16:
            self._cache[token] = ids
        return ids

    def batch_ids(
        self, sentences: Sequence[Sequence[str]], add_boundaries: bool = True
    ) -> Tuple[numpy.ndarray, numpy.ndarray]:
        """As :func:`batch_to_char_ids`, in this scheme."""
        extra = 2 if add_boundaries else 0
        lengths = numpy.array([len(s) + extra for s in sentences], dtype=numpy.int64)
        width = int(lengths.max()) if len(sentences) else 0
        out = numpy.zeros((len(sentences), width, self.width), dtype=numpy.int64)
        offset = 1 if add_boundaries else 0
        for row, sentence in enumerate(sentences):
            if add_boundaries:
                out[row, 0] = self.token_ids(VOCAB_BOS)
                out[row, len(sentence) + 1] = self.token_ids(VOCAB_EOS)
            for i, token in enumerate(sentence):
                if not isinstance(token, str):
                    raise TypeError(f"tokens must be str, found {type(token).__name__} in sentence {row}")
                out[row, i + offset] = self.token_ids(token)
        return out, lengths

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_cache"] = {}
        return state
