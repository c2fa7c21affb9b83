"""Word senses: contextual nearest neighbours and the 1-NN sense evaluation
(mechanics on the random-weights fixture biLM and on a stub)."""
import json
import zlib
from collections import Counter

import numpy
import pytest
from typer.testing import CliRunner

from spacy_elmo import BiLM
from spacy_elmo.cli import app
from spacy_elmo.cli.inputs import load_model
from spacy_elmo.senses.display import format_table
from spacy_elmo.senses.frames import SenseDataError, parse_frames, stem_clashes
from spacy_elmo.senses.word_senses import (
    DATA,
    load_senses,
    nearest_centroid,
    nearest_uses,
    one_nn,
    random_like,
    sense_eval,
)


@pytest.fixture(scope="module")
def fixture_bilm(parity_paths):
    return BiLM.from_hdf5(*parity_paths).eval()


class Spy:
    """Wraps a biLM and records the sentences it was asked to embed."""

    def __init__(self, bilm):
        self.bilm, self.seen = bilm, []

    def embed_sentences(self, sentences, batch_size=64):
        self.seen.extend(list(s) for s in sentences)
        return self.bilm.embed_sentences(sentences, batch_size=batch_size)


def word_vector(word, dim=16):
    return numpy.random.default_rng(zlib.crc32(word.lower().encode())).standard_normal(dim)


class NextWordStub:
    """A fake biLM with two layers: layer 0 is the token's own (context-free)
    vector, layer 1 the vector of the next token, which in ``STUB_DATA``
    is the sense's cue word, plus a little of the token after it."""

    num_layers = 2

    def embed_sentences(self, sentences, batch_size=64):
        out = []
        for s in sentences:
            own = numpy.stack([word_vector(t) for t in s])
            nxt = numpy.stack(
                [
                    word_vector(s[i + 1]) + 0.3 * word_vector(s[i + 2]) if i + 2 < len(s) else word_vector("</S>")
                    for i in range(len(s))
                ]
            )
            out.append(numpy.stack([own, nxt]).astype(numpy.float32))
        return out


FILLERS = ["today", "again", "slowly", "there", "now", "later"]
STUB_DATA = [
    {"word": w, "sense": f"{w}/{cue}", "tokens": ["the", w, cue, filler, "."], "index": 1}
    for w, cues in [("bank", ("river", "loan")), ("bat", ("wings", "ball"))]
    for cue in cues
    for filler in FILLERS
]


def test_dataset_is_crossed_frames():
    items = load_senses()
    assert DATA.name == "senses_en.txt" and DATA.exists()
    frames = {}
    for it in items:
        assert it["tokens"][it["index"]] == it["word"]  # one spelling: layer 0 ties by construction
        assert Counter(t.lower() for t in it["tokens"])[it["word"]] == 1
        assert it["sense"].startswith(it["word"] + "/")
        frames.setdefault(it["frame"], []).append(it)
    words = {it["word"] for it in items}
    assert len(words) >= 30
    for word in words:
        mine = [f for f in frames if f.startswith(word + ":")]
        assert len(mine) >= 8, word
        assert len({it["sense"] for f in mine for it in frames[f]}) == 2, word
    for frame, (a, b) in ((f, pair) for f, pair in frames.items()):
        # A frame: one sentence per sense, the same length and target position,
        # the same words outside the cue slots, and frame words beside the target.
        assert a["sense"] != b["sense"] and a["word"] == b["word"]
        assert len(a["tokens"]) == len(b["tokens"]) and a["index"] == b["index"] and a["cues"] == b["cues"]
        differ = [i for i, (x, y) in enumerate(zip(a["tokens"], b["tokens"])) if x != y]
        assert differ and set(differ) <= set(a["cues"]), frame
        assert a["index"] - 1 not in a["cues"] and a["index"] + 1 not in a["cues"], frame
    # No cue word (nor a word with its first letters) recurs within a sense.
    assert stem_clashes(items) == []
    assert len({tuple(it["tokens"]) for it in items}) == len(items)
    # The tokens are spaCy's English tokens, as a user's text would be split.
    import spacy

    tokenizer = spacy.blank("en").tokenizer
    assert [it["tokens"] for it in items] == [[t.text for t in tokenizer(" ".join(it["tokens"]))] for it in items]


def test_frames_format_and_its_errors(tmp_path):
    text = "== bank: river | money\nWe sat by the [bank] to {watch the ducks | count the cash} .\n"
    a, b = parse_frames(text)
    assert a == {"word": "bank", "sense": "bank/river", "tokens": "We sat by the bank to watch the ducks .".split(),
                 "index": 4, "frame": "bank:1", "cues": [6, 8]}
    assert b["tokens"] == "We sat by the bank to count the cash .".split() and b["sense"] == "bank/money"
    bad = {
        "same number of tokens": "== bank: river | money\nThe [bank] is {muddy | closed today} .",
        "right beside": "== bank: river | money\nThe [bank] {floods | closes} today .",
        "marks its target once": "== bank: river | money\nThe bank is {muddy | closed} .",
        "outside its": "== bank: river | money\nThe [bank] is {a river bank | a money bank} .",
        "before any": "The [bank] is {muddy | closed} .",
        "word header": "== bank river money\n",
        "identical": "== bank: river | money\nThe [bank] is {open | open} .",
        "unbalanced": "== bank: river | money\nThe [bank] is {muddy | closed .",
    }
    for message, text in bad.items():
        path = tmp_path / "set.txt"
        path.write_text(text, encoding="utf-8")
        with pytest.raises(SenseDataError, match=message) as err:
            load_senses(path)
        assert str(path) in str(err.value)
    # Every malformed line is named, not just the first.
    text = "== bank: river | money\nThe [bank] is {muddy | closed today} .\nThe [bank] {floods | closes} .\n"
    with pytest.raises(SenseDataError, match=r"(?s)<frames>:2: .*\n<frames>:3: "):
        parse_frames(text)
    path = tmp_path / "set.jsonl"
    path.write_text('{"word": "bank", "tokens": ["bank"]}\n', encoding="utf-8")
    with pytest.raises(
        SenseDataError, match="set.jsonl:1: the item lacks sense, index: each line needs word, sense, tokens and index"
    ):
        load_senses(path)


def test_sense_file_size_is_bounded(tmp_path, monkeypatch):
    path = tmp_path / "big.txt"
    path.write_text("# " + "x" * 100 + "\n", encoding="utf-8")
    monkeypatch.setattr("spacy_elmo.senses.frames.MAX_BYTES", 50)
    with pytest.raises(SenseDataError, match="big.txt: 103 bytes is more than a sense set may have"):
        load_senses(path)


class FrameEchoStub:
    """A fake biLM that only echoes a sentence's frame: layer 1 of the target
    is a vector of its frame words (shared by both senses of a frame) plus a
    small vector of its cue words. With a cue vocabulary that never repeats,
    it knows nothing about senses."""

    num_layers = 2

    def __init__(self, cue_weight=0.1):
        self.cue_weight = cue_weight

    def embed_sentences(self, sentences, batch_size=64):
        out = []
        for s in sentences:
            own = numpy.stack([word_vector(t) for t in s])
            frame = sum(word_vector(t) for t in s if not t.startswith("cue"))
            cue = sum(word_vector(t) for t in s if t.startswith("cue"))
            layer = frame + self.cue_weight * cue
            out.append(numpy.stack([own, numpy.tile(layer, (len(s), 1))]).astype(numpy.float32))
        return out


def test_leave_one_frame_out_removes_the_frame_partner():
    # Two senses, 8 frames; cue words unique per sentence. Leave-one-out
    # (no frames) would find the frame partner, of the other sense, first:
    # 0% by 1-NN. Held out by frame, the echo model is at chance.
    items = []
    for f in range(8):
        for sense in ("a", "b"):
            items.append({"word": "bank", "sense": f"bank/{sense}", "index": 1, "frame": f"bank:{f}",
                          "tokens": ["the", "bank", f"frame{f}", f"cue{f}{sense}", "."]})
    plain = [{k: v for k, v in it.items() if k != "frame"} for it in items]
    assert sense_eval(FrameEchoStub(), plain, method="1nn")[1]["accuracy"] == 0.0
    by_frame = sense_eval(FrameEchoStub(), items, method="1nn")[1]["accuracy"]
    assert 0.25 <= by_frame <= 0.75
    # A model whose vectors carry the sense (one cue vector per sense, as
    # strong as the frame's) scores 100%: frames are held out, not senses.
    for it in items:
        it["tokens"][3] = "cueA" if it["sense"].endswith("a") else "cueB"
    for method in ("centroid", "1nn"):
        assert sense_eval(FrameEchoStub(cue_weight=3.0), items, method=method)[1]["accuracy"] == 1.0


def test_nearest_uses_finds_the_query_first(fixture_bilm):
    query = "The bank of the river flooded after the rain .".split()
    corpus = [
        "She opened an account at the bank .".split(),
        "Nothing to see here .".split(),
        query,
        "The BANK closed early ; the bank reopened later .".split(),
        "We walked along the river bank .".split(),
        "Banks are not a use of the word .".split(),
    ]
    spy = Spy(fixture_bilm)
    for layer in (1, 2, "mix"):
        spy.seen.clear()
        found = nearest_uses(spy, query, 1, corpus, layer=layer, k=10)
        assert found[0].sentence == 2 and found[0].position == 1
        assert found[0].score == pytest.approx(1.0, abs=1e-4)
        scores = [n.score for n in found]
        assert scores == sorted(scores, reverse=True)
        assert sorted((n.sentence, n.position) for n in found) == [(0, 6), (2, 1), (3, 1), (3, 6), (4, 5)]
        for n in found:
            assert n.tokens[n.position].lower() == "bank"
        assert [s for s in spy.seen[1:]] == [corpus[i] for i in (0, 2, 3, 4)]  # the query, then only uses
    assert len(nearest_uses(fixture_bilm, query, 1, corpus, k=2)) == 2
    assert nearest_uses(fixture_bilm, query, 1, [corpus[1]]) == []


def test_sense_eval_layer0_is_chance_by_construction(fixture_bilm):
    rows = sense_eval(fixture_bilm)
    n = len(load_senses())
    assert [r["layer"] for r in rows] == [0, 1, 2, "mix"]
    assert rows[0]["accuracy"] == 0.5 and rows[0]["tied"] == n
    for r in rows:
        assert r["items"] == n and 0.0 <= r["accuracy"] <= 1.0
        assert len(r["per_word"]) == len({it["word"] for it in load_senses()})


def test_tie_rule():
    senses = ["a", "a", "b", "b"]
    same = numpy.ones((4, 3))
    credits, tied = one_nn(same, senses)
    assert credits == [0.5] * 4 and tied == [True] * 4
    # float32-sized noise on equal vectors (batching on another device) still ties.
    noisy = same + 1e-6 * numpy.random.default_rng(0).standard_normal(same.shape)
    assert one_nn(noisy, senses) == (credits, tied)
    # A tie inside one sense is no tie between senses.
    vectors = numpy.array([[1.0, 0.0], [1.0, 0.2], [1.0, -0.2], [0.0, 1.0], [0.1, 1.0], [1.0, 0.3]])
    credits, tied = one_nn(vectors, ["a", "a", "a", "b", "b", "b"])
    assert credits[0] == 1.0 and not tied[0]  # items 1 and 2 tie, both sense a
    assert credits[5] == 0.0 and not tied[5]  # nearest is item 0, of the other sense
    assert credits[3] == 1.0


@pytest.mark.parametrize("method", ["centroid", "1nn"])
def test_sense_eval_detects_separation(method):
    rows = sense_eval(NextWordStub(), STUB_DATA, method=method)
    by_layer = {r["layer"]: r for r in rows}
    assert by_layer[0]["accuracy"] == 0.5  # context-free: chance
    assert by_layer[1]["accuracy"] == 1.0 and by_layer[1]["tied"] == 0  # the context gives the sense
    assert by_layer[1]["per_word"] == {"bank": 1.0, "bat": 1.0}
    with pytest.raises(ValueError, match="method"):
        sense_eval(NextWordStub(), STUB_DATA, method="knn")


def test_nearest_centroid_leaves_the_item_out_of_its_centroid():
    # Item 0 lies near sense b's centroid, unless its own vector pulled a's towards it.
    vectors = numpy.array([[0.0, 1.0], [1.0, 0.1], [1.0, -0.1], [0.1, 1.0], [-0.1, 1.0]])
    senses = ["a", "a", "a", "b", "b"]
    credits, tied = nearest_centroid(vectors, senses)
    assert credits[0] == 0.0 and credits[1:] == [1.0, 1.0, 1.0, 1.0]
    assert not any(tied)
    # Identical vectors: every item ties across the two senses, credit 1/2.
    assert nearest_centroid(numpy.ones((4, 3)), ["a", "a", "b", "b"]) == ([0.5] * 4, [True] * 4)


def test_cli_model_loader_takes_what_embed_takes(monkeypatch, parity_paths, tmp_path):
    from spacy_elmo import hub

    def load_bilm(weights=None, options=None):
        return load_model(
            None if weights is None else str(weights), None if options is None else str(options), progress=False
        )

    assert isinstance(load_bilm(parity_paths[0]), BiLM)  # options.json beside the weights
    assert isinstance(load_bilm(parity_paths[0].parent), BiLM)  # a model directory
    # No weights: the shipped model (here a stand-in directory).
    shipped = tmp_path / "english"
    shipped.mkdir()
    for path, name in zip(parity_paths, ("weights.hdf5", "options.json")):
        (shipped / name).write_bytes(path.read_bytes())
    monkeypatch.setattr(hub.names, "SHIPPED_MODEL_DIR", shipped)
    assert load_bilm().options.to_dict() == BiLM.from_hdf5(*parity_paths).options.to_dict()
    with pytest.raises(ValueError, match="--options given without --model"):
        load_bilm(options=parity_paths[1])


def test_cli(tmp_path, parity_paths, monkeypatch):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(
        "She opened an account at the bank .\nNo use here .\nWe sat on the bank of the river .\n", encoding="utf-8"
    )
    # Whitespace tokens here: spacy.blank loads every installed spaCy plugin, slow in a test.
    weights = ["--model", str(parity_paths[0]), "--options", str(parity_paths[1]), "--whitespace"]
    runner = CliRunner()
    result = runner.invoke(
        app,
        ["neighbours", "We sat on the bank of the river .", "--word", "bank", "--corpus", str(corpus), "--layer", "1"]
        + weights,
    )
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert "[bank]" in lines[0] and "2 corpus sentences" in lines[0]
    assert lines[1].split()[1] == "1.000" and "river" in lines[1]
    result = runner.invoke(app, ["neighbours", "No bank here", "--word", "river", "--corpus", str(corpus)] + weights)
    assert result.exit_code == 2
    data = tmp_path / "senses.jsonl"
    data.write_text("".join(json.dumps(it) + "\n" for it in STUB_DATA), encoding="utf-8")
    result = runner.invoke(app, ["senses", "--data", str(data)] + weights[:4])
    assert result.exit_code == 0, result.output
    baseline = runner.invoke(app, ["senses", "--data", str(data), "--random-weights"] + weights[:4])
    assert baseline.exit_code == 0 and baseline.output != result.output, baseline.output
    # The command's baseline is the one the figures use: random_like(model, seed 0).
    expected = format_table(sense_eval(random_like(load_model(*map(str, parity_paths), progress=False), seed=0), data))
    assert baseline.output.strip() == expected.strip()
    assert "50.0%" in result.output.splitlines()[1] and " 24 " in result.output and "mean" in result.output
