"""The project's data scripts: parsing, labels, splits and slices (no network)."""

import fetch_sentiment
import fetch_wnut
import pytest
import run_grid
import spacy
from spacy.tokens import Doc, DocBin


def test_wnut_tweets_and_split():
    text = "@paulwalk\tO\nEmpire\tB-facility\nState\tI-facility\n\t\nFrom\tO\nGreen\tB-geo-loc\n\n"
    tweets = list(fetch_wnut.read_tweets(text))
    assert tweets == [(["@paulwalk", "Empire", "State"], ["O", "B-facility", "I-facility"]),
                      (["From", "Green"], ["O", "B-geo-loc"])]
    doc = Doc(spacy.blank("en").vocab, words=tweets[0][0], ents=tweets[0][1])
    assert [(e.text, e.label_) for e in doc.ents] == [("Empire State", "facility")]
    parts = [fetch_wnut.part_of(i) for i in range(20)]
    assert parts.count("train") == 16 and parts.count("dev") == 2 and parts.count("test") == 2


def test_sentiment_labels_and_split():
    text = "id\tsentiment\ttext\n1\t2.27\tA fine   film.\n2\t-0.3\tMeh.\n3\t-1.5\tDull.\n"
    rows = list(fetch_sentiment.read_snippets(text))
    assert rows[0] == (1, 2.27, "A fine film.")
    assert [fetch_sentiment.label_of(score, 0.5) for _, score, _ in rows] == ["POSITIVE", None, "NEGATIVE"]
    assert fetch_sentiment.label_of(0.5, 0.5) == "POSITIVE" and fetch_sentiment.label_of(-0.5, 0.5) == "NEGATIVE"
    assert [fetch_sentiment.part_of(i) for i in (8, 9, 10, 19)] == ["dev", "test", "train", "test"]
    with pytest.raises(ValueError):
        list(fetch_sentiment.read_snippets("no header\n"))


def test_slices_are_nested_per_seed_and_differ_between_seeds(tmp_path):
    vocab = spacy.blank("en").vocab
    train = tmp_path / "train.spacy"
    DocBin(docs=[Doc(vocab, words=[f"w{i}"]) for i in range(200)]).to_disk(train)

    def words(path):
        return [d[0].text for d in DocBin().from_disk(path).get_docs(vocab)]

    assert run_grid.make_slice(train, 100, 0, tmp_path / "s") == train
    small = {s: words(run_grid.make_slice(train, 1, s, tmp_path / "s")) for s in (0, 1)}
    large = {s: words(run_grid.make_slice(train, 10, s, tmp_path / "s")) for s in (0, 1)}
    assert all(len(small[s]) == 2 and len(large[s]) == 20 for s in (0, 1))
    assert all(set(small[s]) <= set(large[s]) for s in (0, 1))
    assert large[0] != large[1]
    # Deterministic: the same file again.
    assert words(run_grid.make_slice(train, 10, 0, tmp_path / "other")) == large[0]
