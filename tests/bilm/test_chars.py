import numpy
import pytest

from spacy_elmo.bilm.chars import MAX_CHARS, batch_to_char_ids, boundary_char_ids, token_char_ids


def test_char_ids_match_reference(parity_sentences, parity_reference):
    ids, lengths = batch_to_char_ids(parity_sentences, add_boundaries=False)
    numpy.testing.assert_array_equal(ids, parity_reference["char_ids"])
    assert lengths.tolist() == [len(s) for s in parity_sentences]


def test_token_layout():
    ids = token_char_ids("ab")
    # +1 scheme: word start 258, bytes, word end 259, padding 260
    assert ids[:5].tolist() == [259, ord("a") + 1, ord("b") + 1, 260, 261]
    assert (ids[5:] == 261).all()
    assert ids.shape == (MAX_CHARS,)


def test_boundaries_wrap_every_sentence():
    bos, eos = boundary_char_ids()
    assert bos[:4].tolist() == [259, 257, 260, 261]
    assert eos[:4].tolist() == [259, 258, 260, 261]
    ids, lengths = batch_to_char_ids([["a", "b"], ["c"]])
    assert lengths.tolist() == [4, 3]
    numpy.testing.assert_array_equal(ids[0, 0], bos)
    numpy.testing.assert_array_equal(ids[0, 3], eos)
    numpy.testing.assert_array_equal(ids[1, 2], eos)
    assert (ids[1, 3] == 0).all()  # padding position: "no token"


def test_long_tokens_are_cut_to_48_bytes():
    ids = token_char_ids("x" * 60)
    assert ids[0] == 259 and ids[49] == 260  # word end at the last slot
    assert (ids[1:49] == ord("x") + 1).all()


@pytest.mark.parametrize("token", ["🙂", "Ünïcødé", "\u200b", "\x00\x07", "東京", "مرحبا", "a\ud800b"])
def test_odd_characters(token):
    ids = token_char_ids(token)
    payload = token.encode("utf-8", "ignore")[:48]
    assert ids[1 : len(payload) + 1].tolist() == [b + 1 for b in payload]
    assert ids[len(payload) + 1] == 260


def test_non_string_token_is_rejected():
    with pytest.raises(TypeError, match="tokens must be str"):
        batch_to_char_ids([["a", 3]])


def test_empty_batch():
    ids, lengths = batch_to_char_ids([])
    assert ids.shape == (0, 0, MAX_CHARS) and lengths.shape == (0,)
