"""embed -o as a library (spacy_elmo.embed): the layout read back against
BiLM.embed_sentences, every character and blank line kept, shards equal to
one run, streaming, resume after an error at several points, refusals of a
changed run, and reading a damaged file."""

import hashlib
import io
import json
from pathlib import Path

import h5py
import numpy
import pytest

from spacy_elmo.embed import (
    EmbeddingsFileError,
    EmbedError,
    EmbedSettings,
    World,
    embed_corpus,
    layout,
    read_embeddings,
)
from spacy_elmo.embed.layout import piece_paths
from tests.helpers.models import random_model

MODEL = {"model": "tiny", "weights_sha256": "w" * 64, "options_sha256": "o" * 64, "options": "{}"}
LINES = [
    "The storm came .",
    "",
    "a / slash , a tab\tand\u00a0no-break space",
    "The storm came .",  # a repeated line: embedded again, kept
    "   ",
    'café 東京 🙂 مرحبا e\u0301 "quotes" <tags> back\\slash',
    "one",
] + [f"line {i} of the text with {'many ' * (i % 7)}words" for i in range(150)]


def whitespace(lines):
    return (line.split() for line in lines)


@pytest.fixture(scope="module")
def bilm():
    return random_model(seed=3)


@pytest.fixture
def source(tmp_path):
    path = tmp_path / "in.txt"
    path.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    return path


def run(bilm, source, output, world=World(), tokenize=whitespace, model=MODEL, **settings):
    settings.setdefault("chunk_kb", 1)
    return embed_corpus(
        bilm, source, output, model=model, tokenize=tokenize, tokenization="whitespace",
        settings=EmbedSettings(**settings), world=world,
    )


def by_chunk(bilm, path, **kwargs):
    """BiLM.embed_sentences on each chunk's sentences, as the file cuts them."""
    with h5py.File(path, "r") as f:
        bounds = f["chunk_offsets"][:].tolist()
        lines = f["lines"][:].tolist()
    sentences = [LINES[i].split() for i in lines]
    return [a for s, e in zip(bounds, bounds[1:]) for a in bilm.embed_sentences(sentences[s:e], **kwargs)]


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ------------------------------------------------------------- the layout
def test_every_line_comes_back_in_order_with_the_biLMs_vectors(bilm, source, tmp_path):
    result = run(bilm, source, tmp_path / "out.h5", batch_size=4)
    assert result.embedded_chunks > 2 and result.resumed_chunks == 0  # several chunks, each length-sorted
    assert not (tmp_path / "out.h5.work").exists()
    emb = read_embeddings(tmp_path / "out.h5")
    assert len(emb) == len(LINES) == result.sentences and emb.lines.tolist() == list(range(len(LINES)))
    expected = by_chunk(bilm, out := tmp_path / "out.h5", batch_size=4)
    whole = bilm.embed_sentences([line.split() for line in LINES], batch_size=4)
    for i, (tokens, array) in enumerate(emb):
        assert tokens == LINES[i].split()  # any character, blank lines (no tokens), repeated lines
        # Bit for bit what embed_sentences gives on the sentences of the chunk (the same batches);
        # other batches differ by float rounding only.
        assert array.dtype == numpy.float32 and numpy.array_equal(array, expected[i]), i
        numpy.testing.assert_allclose(array, whole[i], rtol=0, atol=1e-5)
    assert out.exists()
    assert emb[5][0] == ["café", "東京", "🙂", "مرحبا", "e\u0301", '"quotes"', "<tags>", "back\\slash"]
    assert emb[-1][0] == LINES[-1].split() and emb.line(3) == 3
    assert [t for t, _ in emb[2:4]] == [LINES[2].split(), LINES[3].split()]
    with pytest.raises(IndexError):
        emb[len(LINES)]
    assert emb.attrs["model"] == "tiny" and emb.attrs["weights_sha256"] == "w" * 64
    assert emb.attrs["input_sha256"] == digest(source) and emb.attrs["input_lines"] == len(LINES)
    assert (emb.attrs["sentences"], emb.attrs["tokens"]) == (len(LINES), sum(len(x.split()) for x in LINES))


@pytest.mark.parametrize("layers,dtype", [("top", "float32"), ("mix", "float16"), ("2,0", "float16"), ("1", "float32")])
def test_layers_and_dtype(bilm, source, tmp_path, layers, dtype):
    run(bilm, source, tmp_path / "out.h5", layers=layers, dtype=dtype)
    emb = read_embeddings(tmp_path / "out.h5")
    full = by_chunk(bilm, tmp_path / "out.h5")
    for (_, array), reference in zip(emb, full):
        if layers == "mix":
            kept = reference.mean(axis=0, dtype=numpy.float32)[None]
        else:
            kept = reference[[2] if layers == "top" else [int(i) for i in layers.split(",")]]
        assert array.dtype == numpy.dtype(dtype) and numpy.array_equal(array, kept.astype(dtype))
    assert emb.attrs["layers"] == layers and emb.attrs["dtype"] == dtype


def test_skip_blank_keeps_the_line_numbers(bilm, source, tmp_path):
    run(bilm, source, tmp_path / "out.h5", skip_blank=True)
    emb = read_embeddings(tmp_path / "out.h5")
    kept = [i for i, line in enumerate(LINES) if line.split()]
    assert emb.lines.tolist() == kept and [t for t, _ in emb] == [LINES[i].split() for i in kept]


def test_bad_settings_are_refused_by_name(bilm, source, tmp_path):
    for settings, needle in [
        ({"layers": "5"}, "--layers '5'"),
        ({"layers": "top,1"}, "--layers 'top,1'"),
        ({"dtype": "int8"}, "--dtype 'int8'"),
        ({"batch_size": 0}, "--batch-size"),
    ]:
        with pytest.raises(EmbedError, match=needle):
            run(bilm, source, tmp_path / "out.h5", **settings)


# -------------------------------------------------------------- shards
def test_shards_give_what_one_run_gives(bilm, source, tmp_path):
    run(bilm, source, tmp_path / "one/")
    results = [run(bilm, source, tmp_path / "three", World(rank, 3)) for rank in (2, 0, 1)]
    assert [r.manifest for r in results] == [None, None, tmp_path / "three" / "manifest.json"]  # the last one writes it
    one, three = read_embeddings(tmp_path / "one"), read_embeddings(tmp_path / "three")
    assert len(one) == len(three) == len(LINES) and three.lines.tolist() == list(range(len(LINES)))
    for (t1, a1), (t3, a3) in zip(one, three):
        assert t1 == t3 and numpy.array_equal(a1, a3)
    manifest = json.loads((tmp_path / "three" / "manifest.json").read_text())
    assert manifest["sentences"] == len(LINES) and manifest["settings"]["shards"] == 3
    assert manifest["input"]["sha256"] == digest(source) and "w" * 64 == manifest["model"]["weights_sha256"]
    for entry in manifest["shards"]:
        assert entry["sha256"] == digest(tmp_path / "three" / entry["file"])
    assert sum(e["sentences"] for e in manifest["shards"]) == len(LINES)
    # Reading one shard alone gives its own sentences, with their line numbers.
    alone = read_embeddings(tmp_path / "three" / "shard-00001-of-00003.h5")
    assert [t for t, _ in alone] == [LINES[i].split() for i in alone.lines]


def test_a_shard_that_is_missing_is_named(bilm, source, tmp_path):
    run(bilm, source, tmp_path / "two", World(0, 2))
    with pytest.raises(EmbeddingsFileError, match="missing shard-00001-of-00002.h5"):
        read_embeddings(tmp_path / "two")


# ------------------------------------------------------------ streaming
def test_chunks_are_written_while_the_input_is_still_being_read(bilm, tmp_path):
    """The input is read lazily: by the time its last lines are read, the
    first chunks are finished pieces on disk; the tokenizer never sees more
    than one chunk's lines at once."""
    text = ("".join(f"sentence {i} " * 10 + "\n" for i in range(200))).encode()
    seen_pieces, batch_sizes = [], []

    class Watched(io.BytesIO):
        def readline(self, limit=-1):
            if self.tell() > len(text) - 200:
                seen_pieces.append(len(list((tmp_path / "out.h5.work").glob("chunk-*.npz"))))
            return super().readline(limit)

    def tokenize(lines):
        lines = list(lines)
        batch_sizes.append(len(lines))
        return whitespace(lines)

    result = embed_corpus(
        bilm,
        None,
        tmp_path / "out.h5",
        model=MODEL,
        tokenize=tokenize,
        tokenization="whitespace",
        settings=EmbedSettings(chunk_kb=2),
        stdin=Watched(text),
    )
    assert result.sentences == 200 and len(batch_sizes) == result.embedded_chunks > 5
    assert min(seen_pieces) >= result.embedded_chunks - 2 and max(batch_sizes) < 20


# --------------------------------------------------------------- resume
class Crash(Exception):
    pass


def crashing_tokenizer(after: int):
    calls = {"n": 0}

    def tokenize(lines):
        calls["n"] += 1
        if calls["n"] > after:
            raise Crash()
        return whitespace(lines)

    return tokenize


@pytest.mark.parametrize("after", [0, 1, 4])
def test_a_run_stopped_after_k_chunks_resumes_to_the_same_file(bilm, source, tmp_path, after):
    reference = tmp_path / "ref.h5"
    run(bilm, source, reference)
    out = tmp_path / "out.h5"
    with pytest.raises(Crash):
        run(bilm, source, out, tokenize=crashing_tokenizer(after))
    assert not out.exists() and len(list((tmp_path / "out.h5.work").glob("chunk-*.npz"))) == after
    result = run(bilm, source, out)
    assert (result.resumed_chunks, result.embedded_chunks > 0) == (after, True)
    assert digest(out) == digest(reference)
    again = run(bilm, source, out)  # finished: nothing to do, nothing changes
    assert again.embedded_chunks == again.resumed_chunks == 0 and digest(out) == digest(reference)


def test_a_run_stopped_while_assembling_resumes(bilm, source, tmp_path, monkeypatch):
    reference = tmp_path / "ref.h5"
    run(bilm, source, reference)
    real, calls = layout._copy_rows, []

    def failing(*args):
        calls.append(1)
        if len(calls) == 3:
            raise Crash()
        real(*args)

    monkeypatch.setattr(layout, "_copy_rows", failing)
    with pytest.raises(Crash):
        run(bilm, source, tmp_path / "out.h5")
    monkeypatch.setattr(layout, "_copy_rows", real)
    result = run(bilm, source, tmp_path / "out.h5")
    assert result.embedded_chunks == 0 and digest(tmp_path / "out.h5") == digest(reference)


def test_a_changed_run_is_refused(bilm, source, tmp_path):
    out = tmp_path / "out.h5"
    with pytest.raises(Crash):
        run(bilm, source, out, tokenize=crashing_tokenizer(2))
    with pytest.raises(EmbedError, match="--layers was 'all', now 'top'"):
        run(bilm, source, out, layers="top")
    other = dict(MODEL, weights_sha256="x" * 64)
    with pytest.raises(EmbedError, match=r"the model \(weights SHA-256\) was 'w+', now 'x+'"):
        run(bilm, source, out, model=other)
    changed = LINES.copy()
    changed[0] = "The storm went ."
    source.write_text("\n".join(changed) + "\n", encoding="utf-8")
    with pytest.raises(EmbedError, match=r"lines 1-\d+: the input changed since the run"):
        run(bilm, source, out)
    source.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    run(bilm, source, out)  # the original command resumes
    source.write_text("\n".join(changed) + "\n", encoding="utf-8")
    with pytest.raises(EmbedError, match="embedded from another input"):
        run(bilm, source, out)


def test_a_damaged_piece_is_embedded_again(bilm, source, tmp_path, capsys):
    out = tmp_path / "out.h5"
    with pytest.raises(Crash):
        run(bilm, source, out, tokenize=crashing_tokenizer(2))
    vectors, _ = piece_paths(tmp_path / "out.h5.work", 1)
    vectors.write_bytes(vectors.read_bytes()[:100])
    result = run(bilm, source, out)
    assert result.resumed_chunks == 1 and "its chunk is embedded again" in capsys.readouterr().err
    run(bilm, source, tmp_path / "ref.h5")
    assert digest(out) == digest(tmp_path / "ref.h5")


def test_output_equal_to_the_input_is_refused(bilm, source):
    with pytest.raises(EmbedError, match="is the input file"):
        run(bilm, source, source)
    assert source.read_text(encoding="utf-8").startswith("The storm came .")


# --------------------------------------------------------- reading back
@pytest.fixture
def written(bilm, source, tmp_path):
    out = tmp_path / "out.h5"
    run(bilm, source, out)
    return out


def test_a_truncated_file_is_refused(written):
    data = written.read_bytes()
    for size in (len(data) - 1000, 4000, 10):
        written.write_bytes(data[:size])
        with pytest.raises(EmbeddingsFileError, match=str(written)):
            read_embeddings(written)


@pytest.mark.parametrize(
    "edit,needle",
    [
        (lambda f: f.attrs.__setitem__("sentences", 10**15), "has shape"),
        (lambda f: f.attrs.__setitem__("tokens", -1), "not a count"),
        (lambda f: f.attrs.__setitem__("format", "something/9"), "is not an output of"),
        (lambda f: f.attrs.__setitem__("format", layout.FORMAT_1), "earlier version"),
        (lambda f: f.attrs.__setitem__("dtype", "float64"), "dataset 'vectors'"),
        (lambda f: f.__delitem__("lines"), "dataset 'lines' is missing"),
    ],
)
def test_sizes_in_a_file_are_checked_before_use(written, edit, needle):
    with h5py.File(written, "r+") as f:
        edit(f)
    with pytest.raises(EmbeddingsFileError, match=needle):
        read_embeddings(written)


def test_damaged_offsets_are_caught_when_read(written):
    with h5py.File(written, "r+") as f:
        offsets = f["offsets"]
        offsets[3] = 10**12
    emb = read_embeddings(written)
    assert emb[0][0] == LINES[0].split()
    with pytest.raises(EmbeddingsFileError, match="sentence 2 has offsets"):
        emb[2]


def test_foreign_files_are_refused(tmp_path):
    text = tmp_path / "x.h5"
    text.write_text("not hdf5", encoding="utf-8")
    with pytest.raises(EmbeddingsFileError, match="not a complete output"):
        read_embeddings(text)
    with pytest.raises(EmbeddingsFileError, match="no shard files"):
        read_embeddings(tmp_path)
    with pytest.raises(EmbeddingsFileError, match="no such file"):
        read_embeddings(tmp_path / "nope")


@pytest.mark.parametrize("threads", [-1, 10**6])
def test_thread_counts_out_of_range_are_refused_by_name(threads):
    from spacy_elmo.embed import EmbedError, World, place_model

    message = r"--threads must be a whole number of threads from 1 to \d+ .*\(or 0: the cores"
    with pytest.raises(EmbedError, match=message):
        place_model(random_model(), World(), "cpu", threads)
