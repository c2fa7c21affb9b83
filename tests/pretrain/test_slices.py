"""Pre-tokenised corpus slices: ``tokenise`` writes them, ``pretrain`` reads
them as it reads text, and refuses slices of other settings or damaged ones."""
import subprocess
import sys
import zipfile

import numpy
import pytest

from spacy_elmo.pretrain import read_corpus
from spacy_elmo.pretrain.errors import PretrainError
from spacy_elmo.pretrain.reading import tokenise_slice

A = "The boat drifted toward the muddy bank of the river .\nHe borrowed money from the bank to buy a house .\n"
B = "A third line , with words the first file never used .\nThe bank again .\n"


def _texts(tmp_path):
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text(A, encoding="utf-8")
    b.write_text(B, encoding="utf-8")
    return a, b


def _slice(texts, path, max_tokens=64, lang="en"):
    tokenise_slice(texts, path, lang, max_tokens)
    return path


def test_slices_give_the_corpus_the_text_gives(tmp_path):
    a, b = _texts(tmp_path)
    from_text = read_corpus([a, b, a], max_tokens=6)
    from_slices = read_corpus(
        [_slice([a], tmp_path / "a.npz", 6), _slice([b], tmp_path / "b.npz", 6), tmp_path / "a.npz"], max_tokens=6
    )
    assert from_slices.fingerprint() == from_text.fingerprint()
    assert from_slices.word_counts() == from_text.word_counts()
    assert from_slices.stats.tokens == from_text.stats.tokens and from_slices.stats.lines == from_text.stats.lines
    assert from_slices.stats.files == 3
    mixed = read_corpus([tmp_path / "a.npz", b], max_tokens=6)
    assert mixed.fingerprint() == read_corpus([a, b], max_tokens=6).fingerprint()


def test_a_slice_of_other_settings_is_refused_by_name(tmp_path):
    a, _ = _texts(tmp_path)
    path = _slice([a], tmp_path / "a.npz", max_tokens=5)
    with pytest.raises(
        PretrainError, match=r"a\.npz was tokenised with max_tokens 5, this run uses 64: run with --max-tokens 5"
    ):
        read_corpus([path], max_tokens=64)
    with pytest.raises(PretrainError, match="tokenised with lang 'en', this run uses 'de'"):
        read_corpus([path], lang="de", max_tokens=5)


def test_damaged_or_foreign_slices_are_refused(tmp_path):
    a, _ = _texts(tmp_path)
    path = _slice([a], tmp_path / "a.npz")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(PretrainError, match=r"a\.npz: not a readable pre-tokenised corpus slice"):
        read_corpus([path], max_tokens=64)
    foreign = tmp_path / "foreign.npz"
    numpy.savez(foreign, x=numpy.zeros(3))
    with pytest.raises(PretrainError, match=r"foreign\.npz: not a readable pre-tokenised corpus slice"):
        read_corpus([foreign], max_tokens=64)


def test_a_slice_declaring_too_much_is_refused_before_reading(tmp_path, monkeypatch):
    from spacy_elmo.pretrain import corpus_cache

    a, _ = _texts(tmp_path)
    path = _slice([a], tmp_path / "a.npz")
    with zipfile.ZipFile(path) as archive:
        declared = sum(info.file_size for info in archive.infolist())
    monkeypatch.setattr(corpus_cache, "MAX_SLICE_BYTES", declared - 1)
    with pytest.raises(PretrainError, match="over the 0 GiB a slice may hold"):
        read_corpus([path], max_tokens=64)


def test_tokenise_command_writes_a_slice_pretrain_reads(tmp_path):
    a, b = _texts(tmp_path)
    out = tmp_path / "ab.npz"
    run = subprocess.run(
        [sys.executable, "-m", "spacy_elmo", "tokenise", str(a), str(b), "-o", str(out), "--max-tokens", "8"],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    assert "2 files, 4 lines" in run.stdout
    assert read_corpus([out], max_tokens=8).fingerprint() == read_corpus([a, b], max_tokens=8).fingerprint()
    bad = subprocess.run([sys.executable, "-m", "spacy_elmo", "tokenise", str(a), "-o", str(tmp_path / "x.txt")],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "error: --output" in bad.stderr and "x.npz" in bad.stderr


def test_slices_are_read_and_cached_without_spacy(tmp_path):
    """A machine with torch but no spaCy (a GPU box) trains on slices: reading
    them, and the corpus cache's key, must not import spaCy; text still does."""
    a, b = _texts(tmp_path)
    sliced = _slice([a, b], tmp_path / "ab.npz", 8)
    expected = read_corpus([a, b], max_tokens=8).fingerprint()
    script = (
        "import sys\n"
        "sys.modules['spacy'] = None\n"
        "from spacy_elmo.pretrain.reading import read_corpus\n"
        f"cache = {str(tmp_path / 'cache')!r}\n"
        f"print(read_corpus([{str(sliced)!r}], max_tokens=8, cache_dir=cache).fingerprint())\n"
        f"print(read_corpus([{str(sliced)!r}], max_tokens=8, cache_dir=cache).fingerprint())\n"
        "try:\n"
        f"    read_corpus([{str(a)!r}], max_tokens=8)\n"
        "except ImportError:\n"
        "    print('text needs spacy')\n"
    )
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == [expected, expected, "text", "needs", "spacy"]
    assert len(list((tmp_path / "cache").glob("corpus-*.npz"))) == 1
