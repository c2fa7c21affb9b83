"""The two model families one :class:`~spacy_elmo.BiLM` runs, and what sets
them apart in the options and the input.

* bilm-tf/AllenNLP (:data:`FAMILY_BILM_TF`): byte characters, TensorFlow's
  LSTM with its +1 forget bias, a projection only where the CNN width
  differs.
* ELMoForManyLangs (:data:`FAMILY_EFML`): a character vocabulary
  (:class:`~spacy_elmo.bilm.chars.CharVocabulary`), an optional word
  embedding concatenated before the projection, which is always there,
  PyTorch's LSTM with its biases as stored.

:mod:`.options` calls the checks here for its family fields; this module
imports nothing of it (the options object is handed in).
"""
from typing import Any, Callable, Dict, Optional

from .chars import CharVocabulary

FAMILY_BILM_TF = "bilm-tf"
FAMILY_EFML = "elmoformanylangs"
FAMILIES = (FAMILY_BILM_TF, FAMILY_EFML)
#: Bounds of the ELMoForManyLangs vocabularies (rows of the embeddings).
#: Published: about 10k characters and 70k-400k words.
MAX_VOCAB_CHARS = 1 << 21
MAX_VOCAB_WORDS = 1 << 24
MAX_WORD_DIM = 4096


def check_family_fields(options, problem: Callable[[str, str], None], is_int: Callable[[Any], bool]) -> None:
    """Report (``problem(field, text)``) each family field of ``options``
    that is out of bounds or does not fit its family."""
    o = options
    if o.family not in FAMILIES:
        problem("family", f"must be one of {FAMILIES}, found {o.family!r}")
    elif o.family == FAMILY_BILM_TF:
        if not is_int(o.n_characters) or o.n_characters not in (261, 262):
            problem("n_characters", f"must be 261 or 262, found {o.n_characters!r}")
        if o.word_embedding_dim or o.n_words:
            problem("word_embedding_dim", "must be 0: bilm-tf models have no word embedding")
        return
    if not is_int(o.n_characters) or not 6 <= o.n_characters <= MAX_VOCAB_CHARS:
        problem(
            "n_characters", f"must be a character vocabulary size in [6, {MAX_VOCAB_CHARS}], found {o.n_characters!r}"
        )
    if not is_int(o.word_embedding_dim) or not 0 <= o.word_embedding_dim <= MAX_WORD_DIM:
        problem("word_embedding_dim", f"must be in [0, {MAX_WORD_DIM}], found {o.word_embedding_dim!r}")
    elif not is_int(o.n_words) or not (
        (o.word_embedding_dim == 0 and o.n_words == 0)
        or (o.word_embedding_dim > 0 and 2 <= o.n_words <= MAX_VOCAB_WORDS)
    ):
        problem(
            "n_words", f"must be in [2, {MAX_VOCAB_WORDS}] with a word embedding and 0 without, found {o.n_words!r}"
        )


def write_family_fields(options, data: Dict[str, Any]) -> None:
    """Add the family fields of a non-bilm-tf ``options`` to its JSON ``data``."""
    if options.family == FAMILY_BILM_TF:
        return
    data["family"] = options.family
    data["char_cnn"]["n_characters"] = options.n_characters
    if options.word_embedding_dim:
        data["word_embedding"] = {"dim": options.word_embedding_dim, "n_words": options.n_words}


def check_vocabulary(options, vocabulary: Optional[CharVocabulary]) -> Optional[CharVocabulary]:
    """The vocabulary an ELMoForManyLangs model needs (None for bilm-tf),
    checked against the embedding sizes of ``options``."""
    if options.family != FAMILY_EFML:
        if vocabulary is not None:
            raise ValueError(f"a {options.family} biLM reads bytes: it takes no character vocabulary")
        return None
    if not isinstance(vocabulary, CharVocabulary):
        raise ValueError("an ELMoForManyLangs biLM needs its vocabulary (a CharVocabulary of char.dic and word.dic)")
    if vocabulary.max_chars != options.max_characters_per_token:
        raise ValueError(
            f"the vocabulary cuts tokens at {vocabulary.max_chars} characters, the options at "
            f"{options.max_characters_per_token}"
        )
    for name, table, rows in (
        ("char", vocabulary.chars, options.n_characters),
        ("word", vocabulary.words, options.n_words),
    ):
        if table is None:
            if name == "word" and options.word_embedding_dim:
                raise ValueError("the biLM has a word embedding but its vocabulary has no words (word.dic)")
            continue
        if name == "word" and not options.word_embedding_dim:
            raise ValueError("the vocabulary has words (word.dic) but the biLM has no word embedding")
        low, top = min(table.values()), max(table.values())
        if low < 0 or top >= rows:
            raise ValueError(
                f"{name}.dic holds ids in [{low}, {top}] but the {name} embedding has {rows} rows "
                f"(ids must lie in [0, {rows - 1}])"
            )
    return vocabulary
