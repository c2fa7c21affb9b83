"""The ELMo paper's all-words sense evaluation (spacy_elmo.senses.wsd) on a few
sentences written for these tests, in the framework's format: exact F1 by
construction with a stand-in biLM, then the real biLM code, the cache, the
command and the errors."""
import gzip
import json
import zlib

import numpy
import pytest
from typer.testing import CliRunner

from spacy_elmo import BiLM
from spacy_elmo.cli import app
from spacy_elmo.senses import wsd

# A tiny index.sense: bank's river sense is WordNet's first here, money the second.
INDEX = """\
bank%1:14:00:: 08420278 2 20
bank%1:17:01:: 09213565 1 25
bank%2:40:00:: 02343056 1 0
crane%1:05:00:: 02012849 1 2
crane%1:06:00:: 03126580 2 0
pick_up%2:35:00:: 01454810 1 5
pick_up%2:38:00:: 01972976 2 3
plant%1:03:00:: 00017222 1 8
plant%1:06:01:: 03956922 2 12
"""
RIVER, MONEY = "bank%1:17:01::", "bank%1:14:00::"
LIFT, COLLECT = "pick_up%2:35:00::", "pick_up%2:38:00::"

# Training, SemCor's way: multiwords joined by "_", plain tokens as <wf>.
# MFS: bank -> money (2 of 3), pick_up -> collect (2 of 3): both not WordNet's first.
TRAIN = [
    [("The",), ("bank", "bank", "NOUN", RIVER), ("of",), ("the",), ("river",), ("flooded",), (".",)],
    [("The",), ("bank", "bank", "NOUN", MONEY), ("lent",), ("money",), (".",)],
    [("A",), ("bank", "bank", "NOUN", MONEY), ("lent",), ("more",), (".",)],
    [("He",), ("picked_up", "pick_up", "VERB", LIFT), ("the",), ("box",), (".",)],
    [("We",), ("picked_up", "pick_up", "VERB", COLLECT), ("her",), ("brother",), (".",)],
    [("They",), ("picked_up", "pick_up", "VERB", COLLECT), ("her",), ("cousin",), (".",)],
]
# Test, the framework's way: multiwords with spaces. Per instance, which rows
# get it right (L0: context-free, every bank alike, so the tie goes to
# WordNet's first sense; L1: the next word's vector, the sense's cue).
TEST = [
    # tokens, then (gold keys), and right by: L0 L1 mean WN1 MFS
    ([("The",), ("bank", "bank", "NOUN", RIVER), ("of",), ("the",), ("lake",), (".",)], (1, 1, 1, 1, 0)),
    ([("Our",), ("bank", "bank", "NOUN", MONEY), ("lent",), ("cash",), (".",)], (0, 1, 1, 0, 1)),
    ([("Their",), ("bank", "bank", "NOUN", MONEY), ("lent",), ("less",), (".",)], (0, 1, 1, 0, 1)),
    ([("She",), ("picked up", "pick_up", "VERB", COLLECT), ("her",), ("sister",), (".",)], (0, 1, 1, 0, 1)),
    ([("I",), ("picked up", "pick_up", "VERB", LIFT), ("the",), ("pen",), (".",)], (1, 1, 1, 1, 0)),
    # Unseen in training: WordNet's first sense, right for crane, wrong for plant.
    ([("A",), ("crane", "crane", "NOUN", "crane%1:05:00::"), ("flew",), ("over",), (".",)], (1, 1, 1, 1, 1)),
    ([("The",), ("plant", "plant", "NOUN", "plant%1:06:01::"), ("closed",), (".",)], (0, 0, 0, 0, 0)),
    # Two gold keys: either answer is right.
    ([("The",), ("bank", "bank", "NOUN", f"{MONEY} {RIVER}"), ("of",), ("the",), ("pond",), (".",)], (1, 1, 1, 1, 1)),
]
ROWS = ("L0", "L1", "mean", "WN1", "MFS")
EXPECTED = {row: 100.0 * sum(right[i] for _, right in TEST) / len(TEST) for i, row in enumerate(ROWS)}


def write_set(folder, name, sentences, gz=False, prefix="d000"):
    """``name.data.xml`` and ``name.gold.key.txt`` (gzipped with ``gz``)."""
    xml = ['<?xml version="1.0" encoding="UTF-8" ?>', f'<corpus lang="en" source="{name}">', f'<text id="{prefix}">']
    keys = []
    for s, tokens in enumerate(sentences):
        xml.append(f'<sentence id="{prefix}.s{s:03d}">')
        for t, token in enumerate(tokens):
            if len(token) == 1:
                xml.append(f"<wf>{token[0]}</wf>")
            else:
                ident = f"{prefix}.s{s:03d}.t{t:03d}"
                xml.append(f'<instance id="{ident}" lemma="{token[1]}" pos="{token[2]}">{token[0]}</instance>')
                keys.append(f"{ident} {token[3]}")
        xml.append("</sentence>")
    xml += ["</text>", "</corpus>", ""]
    data, gold = folder / f"{name}.data.xml", folder / f"{name}.gold.key.txt"
    for path, text in ((data, "\n".join(xml)), (gold, "\n".join(keys) + "\n")):
        if gz:
            path = path.with_name(path.name + ".gz")
            path.write_bytes(gzip.compress(text.encode()))
        else:
            path.write_text(text, encoding="utf-8")
    return data.with_name(data.name + ".gz") if gz else data


@pytest.fixture()
def files(tmp_path):
    train = write_set(tmp_path, "semcor", TRAIN, gz=True)
    test = write_set(tmp_path, "tiny07", [tokens for tokens, _ in TEST])
    index = tmp_path / "index.sense"
    index.write_text(INDEX, encoding="utf-8")
    return train, test, index


def word_vector(word, dim=16):
    return numpy.random.default_rng(zlib.crc32(word.lower().encode())).standard_normal(dim)


class NextWordStub:
    """A stand-in biLM: layer 0 is the token's own vector (context-free),
    layer 1 the next token's (the context). Records what it embeds."""

    num_layers = 2

    def __init__(self):
        self.seen = []

    def embed_sentences(self, sentences, batch_size=64):
        self.seen.extend(list(s) for s in sentences)
        out = []
        for s in sentences:
            own = numpy.stack([word_vector(t) for t in s])
            nxt = numpy.stack([word_vector(s[i + 1] if i + 1 < len(s) else "</S>") for i in range(len(s))])
            out.append(numpy.stack([own, nxt]).astype(numpy.float32))
        return out


def f1s(report, name="tiny07"):
    layers = report.model["layers"]
    return {"L0": layers[0][name]["f1"], "L1": layers[1][name]["f1"], "mean": layers["mean"][name]["f1"],
            "WN1": report.model["first_sense"][name]["f1"], "MFS": report.model["most_frequent"][name]["f1"]}


def test_exact_f1_by_construction(files):
    train, test, index = files
    stub = NextWordStub()
    report = wsd.run(stub, [wsd.read_set(train)], [wsd.read_set(test)], wsd.read_sense_index(index))
    assert EXPECTED == {"L0": 50.0, "L1": 87.5, "mean": 87.5, "WN1": 50.0, "MFS": 62.5}
    assert f1s(report) == pytest.approx(EXPECTED, abs=1e-9)
    # Every instance is answered: P = R = F1.
    for scores in [*report.model["layers"].values(), report.model["first_sense"], report.model["most_frequent"]]:
        assert scores["tiny07"]["precision"] == scores["tiny07"]["recall"] == scores["tiny07"]["f1"]
        assert scores["tiny07"]["answered"] == len(TEST)
    assert report.model["fallback"] == {"tiny07": 2}  # crane and plant
    # Multiwords are split into their parts ("picked_up" and "picked up" alike).
    assert ["He", "picked", "up", "the", "box", "."] in stub.seen
    assert ["She", "picked", "up", "her", "sister", "."] in stub.seen
    assert report.centroids.keys == sorted({MONEY, RIVER, LIFT, COLLECT})
    assert dict(zip(report.centroids.keys, report.centroids.counts.tolist())) == {
        MONEY: 2,
        RIVER: 1,
        LIFT: 1,
        COLLECT: 2,
    }


def test_multiword_vector_is_the_mean_of_its_parts(files):
    train, _, _ = files
    stub = NextWordStub()
    centroids = wsd.compute_centroids(stub, [wsd.read_set(train)])
    collect = centroids.vectors[centroids.keys.index(COLLECT)]
    # Layer 0: mean of "picked" and "up"; layer 1: mean of the next words "up" and "her".
    numpy.testing.assert_allclose(collect[0], (word_vector("picked") + word_vector("up")) / 2, rtol=1e-6)
    numpy.testing.assert_allclose(collect[1], (word_vector("up") + word_vector("her")) / 2, rtol=1e-6)
    # Only the first part would make layer 1 the same for both senses ("up"): the tie would go to
    # WordNet's first sense (lift) and the collect instance would be lost; the mean gets it.
    assert wsd.split_token("picked_up") == wsd.split_token("picked  up") == ["picked", "up"]


def test_real_bilm_layer0_ties_go_to_the_first_sense(files, parity_paths, tmp_path):
    # The character encoder gives every "bank" the same vector: both senses' layer-0
    # centroids are equal, so the tie rule answers WordNet's first sense (L0 = WN1 here).
    train, test, index = files
    bilm = BiLM.from_hdf5(*parity_paths).eval()
    report = wsd.run(bilm, [wsd.read_set(train)], [wsd.read_set(test)], wsd.read_sense_index(index),
                     random_seeds=(0, 1), cache_dir=tmp_path / "cache")
    got = f1s(report)
    assert got["L0"] == EXPECTED["WN1"] and got["WN1"] == EXPECTED["WN1"] and got["MFS"] == EXPECTED["MFS"]
    assert sorted(report.random) == [0, 1] and all(list(r) == [0, 1, 2, "mean"] for r in report.random.values())
    # The random rows are the protocol run on random_twin(bilm, seed) itself.
    twin = wsd.run(wsd.random_twin(bilm, 1), [wsd.read_set(train)], [wsd.read_set(test)], wsd.read_sense_index(index))
    assert {k: v["tiny07"] for k, v in twin.model["layers"].items()} == {
        k: v["tiny07"] for k, v in report.random[1].items()
    }
    # Same model, same data: the second run reads every centroid from the cache, same figures.
    again = wsd.run(bilm, [wsd.read_set(train)], [wsd.read_set(test)], wsd.read_sense_index(index),
                    random_seeds=(0, 1), cache_dir=tmp_path / "cache")
    assert report.cached == {"centroids": False, "random seed 0": False, "random seed 1": False}
    assert again.cached == {"centroids": True, "random seed 0": True, "random seed 1": True}
    assert again.model == report.model and again.random == report.random
    assert len(list((tmp_path / "cache").glob("centroids-*.npz"))) == 3
    # The cache holds plain arrays (no pickle) and names what it was made from.
    path = next((tmp_path / "cache").glob(f"centroids-{wsd.model_digest(bilm)[:16]}-L3-*.npz"))
    with numpy.load(path, allow_pickle=False) as npz:
        meta = json.loads(str(npz["meta"]))
        assert meta["weights_sha256"] == wsd.model_digest(bilm) and meta["layers"] == 3
        assert meta["data_sha256"] == wsd.data_digest([wsd.read_set(train)])
        numpy.testing.assert_array_equal(npz["vectors"], report.centroids.vectors)


def test_cache_is_keyed_by_the_data_and_rejects_a_stale_file(files, tmp_path):
    train, test, index = files
    stub = NextWordStub()
    stub.options = BiLM(_tiny_options()).options
    stub.state_dict = lambda: {}
    first, cached = wsd.centroids_for(stub, [wsd.read_set(train)], tmp_path / "c")
    assert not cached
    # Other training data (one token changed): another key, embedded again.
    other = write_set(
        tmp_path,
        "other",
        TRAIN[:-1] + [[("They",), ("picked_up", "pick_up", "VERB", COLLECT), ("her",), ("aunt",), (".",)]],
    )
    _, cached = wsd.centroids_for(stub, [wsd.read_set(other)], tmp_path / "c")
    assert not cached and len(list((tmp_path / "c").glob("*.npz"))) == 2
    # A cache file of the right name whose contents do not match is recomputed and replaced.
    path = next(p for p in (tmp_path / "c").glob("*.npz") if first.meta["data_sha256"][:16] in p.name)
    path.write_bytes(b"not an npz")
    again, cached = wsd.centroids_for(stub, [wsd.read_set(train)], tmp_path / "c")
    assert not cached and numpy.array_equal(again.vectors, first.vectors)
    assert wsd.centroids_for(stub, [wsd.read_set(train)], tmp_path / "c")[1]


def _tiny_options():
    from tests.helpers.models import small_options

    return small_options()


def test_unanswered_instances_make_precision_differ_from_recall():
    instances = [wsd.Instance(f"i{i}", "x", "NOUN", 0, i, i + 1, (f"x%1:00:0{i}::",)) for i in range(4)]
    answers = ["x%1:00:00::", "x%1:00:00::", None, None]  # 1 right of 2 answered, of 4
    got = wsd.score(instances, answers)
    assert (got["precision"], got["recall"], got["answered"], got["correct"]) == (50.0, 25.0, 2, 1)
    assert got["f1"] == pytest.approx(2 * 50 * 25 / 75)


def test_pooled_all_and_framework_directory(files, tmp_path):
    train, test, index = files
    framework = tmp_path / "WSD_Evaluation_Framework"
    for name, sentences in (("tiny07", [t for t, _ in TEST]), ("tiny13", [t for t, _ in TEST[:2]])):
        folder = framework / "Evaluation_Datasets" / name
        folder.mkdir(parents=True)
        write_set(folder, name, sentences)
    (framework / "Training_Corpora" / "SemCor").mkdir(parents=True)
    write_set(framework / "Training_Corpora" / "SemCor", "semcor", TRAIN)
    tests = [wsd.read_set(p) for p in wsd.find_sets(framework, "test")]
    assert [t.name for t in tests] == ["tiny07", "tiny13"]
    [semcor] = wsd.find_sets(framework, "train")
    assert semcor.parent.name == "SemCor"
    report = wsd.run(NextWordStub(), [wsd.read_set(semcor)], tests, wsd.read_sense_index(index))
    assert report.sets == ["tiny07", "tiny13", "ALL"]
    assert f1s(report, "tiny13") == {"L0": 50.0, "L1": 100.0, "mean": 100.0, "WN1": 50.0, "MFS": 50.0}  # river, money
    # ALL pools the instances: 8 + 2.
    assert f1s(report, "ALL")["L1"] == pytest.approx(100.0 * 9 / 10)
    assert report.model["layers"][1]["ALL"]["instances"] == 10


def test_command(files, parity_paths, tmp_path):
    train, test, index = files
    runner = CliRunner()
    out = tmp_path / "wsd.json"
    args = [
        "wsd",
        "--train",
        str(train),
        "--test",
        str(test),
        "--sense-index",
        str(index),
        "--model",
        str(parity_paths[0]),
        "--random-seeds",
        "2",
        "--cache",
        str(tmp_path / "cache"),
        "--json",
        str(out),
        "--no-progress",
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["F1", "(%)", "tiny07"]
    assert [line.rsplit("  ", 1)[0].strip() for line in lines[1:11]] == [
        "biLM layer 0", "biLM layer 1", "biLM layer 2", "biLM mean of the layers", "WordNet first sense",
        "SemCor most frequent sense", "random weights, layer 0 (2 seeds)", "random weights, layer 1 (2 seeds)",
        "random weights, layer 2 (2 seeds)", "random weights, mean of the layers (2 seeds)"]
    assert lines[5].split()[-1] == "50.0" and lines[6].split()[-1] == "62.5"
    assert "tiny07: 8 instances, 2 of them with a lemma+POS unseen in training" in result.stdout
    data = json.loads(out.read_text())
    assert data["first_sense"]["tiny07"]["f1"] == 50.0 and data["most_frequent"]["tiny07"]["f1"] == 62.5
    assert data["random"]["seeds"] == [0, 1]
    per_seed = [data["random"]["per_seed"][s]["2"]["tiny07"] for s in ("0", "1")]
    assert data["random"]["f1"]["2"]["tiny07"]["mean"] == pytest.approx(sum(per_seed) / 2)
    assert data["model"]["weights_sha256"] and data["model"]["layers"] == 3
    assert str(tmp_path) not in out.read_text()  # file names and digests, no paths
    assert data["cached"] == {"centroids": False, "random seed 0": False, "random seed 1": False}
    again = runner.invoke(app, args)
    assert again.exit_code == 0 and again.stdout == result.stdout
    assert json.loads(out.read_text())["cached"] == {"centroids": True, "random seed 0": True, "random seed 1": True}


def test_command_errors(files, parity_paths, tmp_path):
    train, test, index = files
    runner = CliRunner()
    base = [
        "wsd",
        "--train",
        str(train),
        "--test",
        str(test),
        "--model",
        str(parity_paths[0]),
        "--random-seeds",
        "0",
        "--no-cache",
    ]
    result = runner.invoke(app, base + ["--sense-index", str(tmp_path / "missing.sense")])
    assert result.exit_code == 2 and "--sense-index" in result.stderr and "missing.sense" in result.stderr
    result = runner.invoke(
        app, ["wsd", "--train", str(tmp_path / "nope"), "--test", str(test), "--sense-index", str(index)]
    )
    assert result.exit_code == 2 and "--train" in result.stderr and "nope" in result.stderr
    result = runner.invoke(app, base + ["--test", str(test), "--sense-index", str(index)])
    assert result.exit_code == 2 and "two test sets named 'tiny07'" in result.stderr


def test_missing_sense_index_names_the_package(tmp_path):
    with pytest.raises(FileNotFoundError, match="wordnet-sense-index") as err:
        wsd.read_sense_index(tmp_path / "index.sense")
    assert err.value.filename == str(tmp_path / "index.sense")


@pytest.mark.parametrize("text, message", [
    ("bank%1:14:00:: 08420278 1\n", "index.sense:1: a line of index.sense reads"),
    ("bank%1:14:00:: 08420278 one 3\n", "index.sense:1: a line of index.sense reads"),
    ("bank 08420278 1 3\n", "index.sense:1: 'bank' with sense number 1 is not a WordNet sense key"),
    ("bank%1:14:00:: 08420278 2 3\n", "no sense with sense number 1"),
])
def test_sense_index_errors(tmp_path, text, message):
    path = tmp_path / "index.sense"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(wsd.WSDDataError, match=message):
        wsd.read_sense_index(path)


def test_bounds(files, tmp_path, monkeypatch):
    train, test, index = files
    monkeypatch.setattr(wsd, "MAX_XML_BYTES", 100)
    with pytest.raises(wsd.WSDDataError, match=r"semcor.data.xml.gz: more than 100 bytes decompressed"):
        wsd.read_set(train)
    monkeypatch.setattr(wsd, "MAX_LINE_CHARS", 20)
    with pytest.raises(wsd.WSDDataError, match=r"index.sense:1: a line of more than 20 characters"):
        wsd.read_sense_index(index)


def _broken(tmp_path, xml=None, keys=None):
    data = write_set(tmp_path, "broken", [tokens for tokens, _ in TEST[:2]])
    if xml is not None:
        data.write_text(xml(data.read_text()), encoding="utf-8")
    if keys is not None:
        gold = tmp_path / "broken.gold.key.txt"
        gold.write_text(keys(gold.read_text()), encoding="utf-8")
    return data


@pytest.mark.parametrize(
    "xml, keys, message",
    [
        (
            lambda t: t.replace("</text>", "</txt>"),
            None,
            r"broken.data.xml:19: not well-formed XML \(mismatched tag, column 2\)",
        ),
        (lambda t: t.replace("</sentence>", "", 1), None, r"broken.data.xml:12: a <sentence> inside a <sentence>"),
        (
            lambda t: t.replace("<corpus", '<!DOCTYPE c [<!ENTITY e "x">]>\n<corpus'),
            None,
            r"broken.data.xml:2: a DOCTYPE",
        ),
        (
            lambda t: t.replace('pos="NOUN"', 'pos="N"', 1),
            None,
            r"broken.data.xml:6: instance d000.s000.t001: pos 'N' is not one of",
        ),
        (lambda t: t.replace('lemma="bank" ', "", 1), None, r"broken.data.xml:6: an <instance> without lemma"),
        (lambda t: t.replace("<wf>The</wf>", "<wf> </wf>", 1), None, r"broken.data.xml:5: an empty <wf>"),
        (lambda t: t.replace("<wf>The</wf>", "<w>The</w>", 1), None, r"broken.data.xml:5: unexpected element <w>"),
        (
            None,
            lambda k: k + "d009.s000.t001 bank%1:14:00::\n",
            r"broken.gold.key.txt:3: instance 'd009.s000.t001' is not in .*broken.data.xml",
        ),
        (
            None,
            lambda k: k.splitlines()[0] + "\n",
            r"broken.gold.key.txt: no sense for 1 of the 2 instances of .*broken.data.xml \(e.g. d000.s001.t001\)",
        ),
        (
            None,
            lambda k: k.replace("bank%1:14:00::", "money"),
            r"broken.gold.key.txt:2: 'money' is not a WordNet sense key",
        ),
        (
            None,
            lambda k: k + k.splitlines()[0] + "\n",
            r"broken.gold.key.txt:3: instance 'd000.s000.t001' has a second line",
        ),
        (None, lambda k: k + "d000.s000.t001\n", r"broken.gold.key.txt:3: a line reads 'INSTANCE_ID SENSE_KEY"),
    ],
)
def test_data_errors_name_the_file(tmp_path, xml, keys, message):
    data = _broken(tmp_path, xml, keys)
    with pytest.raises(wsd.WSDDataError, match=message):
        wsd.read_set(data)


def test_file_errors(tmp_path):
    data = write_set(tmp_path, "lonely", [TEST[0][0]])
    (tmp_path / "lonely.gold.key.txt").unlink()
    with pytest.raises(wsd.WSDDataError, match="lonely.data.xml: no gold key file beside it"):
        wsd.read_set(data)
    bad = tmp_path / "bad.data.xml.gz"
    bad.write_bytes(gzip.compress(b"<corpus></corpus>")[:12])
    (tmp_path / "bad.gold.key.txt").write_text("", encoding="utf-8")
    with pytest.raises(wsd.WSDDataError, match="bad.data.xml.gz: not a readable gzip file"):
        wsd.read_set(bad)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(wsd.WSDDataError, match="no \\*.data.xml"):
        wsd.find_sets(empty)


def test_a_lemma_nowhere_goes_unanswered(files, tmp_path):
    train, _, index = files
    test = write_set(tmp_path, "odd", [TEST[1][0], [("A",), ("zebra", "zebra", "NOUN", "zebra%1:05:00::"), (".",)]])
    report = wsd.run(NextWordStub(), [wsd.read_set(train)], [wsd.read_set(test)], wsd.read_sense_index(index))
    got = report.model["layers"][1]["odd"]
    assert (got["answered"], got["correct"], got["precision"], got["recall"]) == (1, 1, 100.0, 50.0)
    assert report.model["first_sense"]["odd"]["answered"] == 1
    assert "odd: 2 instances, 0 of them with a lemma+POS unseen in training (answered by WordNet's first sense); " \
           "1 without an answer (lemma+POS in neither), so P != R" in wsd.format_table(report)
