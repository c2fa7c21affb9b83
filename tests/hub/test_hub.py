"""Models by name, path and URL (spacy_elmo.hub), against a local HTTP server
on 127.0.0.1 that serves the fixture weights laid out like AllenNLP's bucket."""
import os
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import numpy
import pytest
import spacy
from spacy.tokens import Doc

from spacy_elmo import BiLM, hub, loading
from spacy_elmo.hub import DownloadError, ModelNotFoundError
from tests.helpers.paths import ALLENNLP, PARITY, REPO
from tests.helpers.server import Server

SMALL = hub.PUBLISHED_MODELS["small"]
MEDIUM = hub.PUBLISHED_MODELS["medium"]


def _bucket_dir(root: Path, shape: str, weights: Path, options: Path) -> None:
    folder = root / shape
    folder.mkdir(parents=True)
    shutil.copy(weights, folder / f"elmo_{shape}_weights.hdf5")
    shutil.copy(options, folder / f"elmo_{shape}_options.json")


@pytest.fixture
def server(tmp_path):
    root = tmp_path / "served"
    _bucket_dir(root, SMALL, PARITY / "weights.hdf5", PARITY / "options.json")
    _bucket_dir(root, MEDIUM, ALLENNLP / "lm_weights.hdf5", ALLENNLP / "options.json")
    # corrupt copies: bytes that are not hdf5, weights that do not fit their
    # options, options that are not JSON
    corrupt = root / "corrupt"
    _bucket_dir(corrupt, SMALL, PARITY / "weights.hdf5", PARITY / "options.json")
    path = corrupt / SMALL / f"elmo_{SMALL}_weights.hdf5"
    path.write_bytes(bytes(reversed(path.read_bytes())))
    _bucket_dir(corrupt, MEDIUM, ALLENNLP / "lm_weights.hdf5", PARITY / "options.json")
    shape = hub.PUBLISHED_MODELS["original"]
    _bucket_dir(corrupt, shape, PARITY / "weights.hdf5", PARITY / "options.json")
    (corrupt / shape / f"elmo_{shape}_options.json").write_text("{not json")
    srv = Server(root).start()
    yield srv
    srv.stop()


@pytest.fixture
def no_network(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the network was used")

    monkeypatch.setattr("urllib.request.OpenerDirector.open", refuse)


def files_in(folder: Path):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) if folder.exists() else []


def embed(bilm, sentences):
    return bilm.eval().embed_sentences(sentences)


def assert_same_outputs(a, b, sentences):
    for x, y in zip(embed(a, sentences), embed(b, sentences)):
        numpy.testing.assert_array_equal(x, y)


def free_port_url():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


# ------------------------------------------------------------------ names
def test_published_names_urls_and_cache_layout(cache, monkeypatch):
    base = "https://s3-us-west-2.amazonaws.com/allennlp/models/elmo"
    assert hub.PUBLISHED_BASE_URL == base
    expected = {
        "small": "2x1024_128_2048cnn_1xhighway",
        "medium": "2x2048_256_2048cnn_1xhighway",
        "original": "2x4096_512_2048cnn_2xhighway",
        "original-5.5b": "2x4096_512_2048cnn_2xhighway_5.5B",
    }
    assert hub.PUBLISHED_MODELS == expected
    for name, shape in expected.items():
        assert hub.published_urls(name) == (
            f"{base}/{shape}/elmo_{shape}_weights.hdf5",
            f"{base}/{shape}/elmo_{shape}_options.json",
        )
        assert hub.published_cache_paths(name) == (
            cache / shape / f"elmo_{shape}_weights.hdf5",
            cache / shape / f"elmo_{shape}_options.json",
        )
    assert hub.published_urls("Original-5.5B")[0].endswith("_5.5B_weights.hdf5")
    monkeypatch.setenv(hub.MIRROR_ENV, "http://mirror.example/elmo/")
    assert hub.published_urls("small")[0] == f"http://mirror.example/elmo/{SMALL}/elmo_{SMALL}_weights.hdf5"
    monkeypatch.delenv(hub.CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", "/somewhere")
    if sys.platform.startswith("linux"):
        assert hub.cache_dir() == Path("/somewhere/spacy_elmo")


def test_by_name_matches_the_local_files_and_second_use_reads_the_cache(server, cache, monkeypatch, parity_sentences):
    monkeypatch.setenv(hub.MIRROR_ENV, f"{server.url}/bucket")
    local = BiLM.from_hdf5(PARITY / "weights.hdf5", PARITY / "options.json")
    downloaded = BiLM.from_pretrained("small", progress=False)
    assert_same_outputs(downloaded, local, parity_sentences)
    assert files_in(cache) == sorted(
        [SMALL, f"{SMALL}/elmo_{SMALL}_options.json", f"{SMALL}/elmo_{SMALL}_weights.hdf5"]
    )
    assert (cache / SMALL / f"elmo_{SMALL}_weights.hdf5").read_bytes() == (PARITY / "weights.hdf5").read_bytes()
    n_requests = len(server.requests)
    assert n_requests == 2
    # a second use reads the cache only: the server is gone and urlopen refuses
    server.stop()
    monkeypatch.setattr("urllib.request.OpenerDirector.open", lambda *a, **k: pytest.fail("network used"))
    again = BiLM.from_pretrained("small", progress=False)
    assert_same_outputs(again, local, parity_sentences)


def test_a_fresh_download_is_read_and_checked_once(server, cache, monkeypatch):
    """The format check the loader hands the hub keeps what it read: the
    model gets those arrays, the file is not read a second time."""
    from spacy_elmo.bilm import weights as weights_module

    monkeypatch.setenv(hub.MIRROR_ENV, f"{server.url}/bucket")
    real = weights_module.read_datasets
    reads = []
    monkeypatch.setattr(weights_module, "read_datasets", lambda *a, **k: reads.append(a[0]) or real(*a, **k))
    BiLM.from_pretrained("small", progress=False)
    assert len(reads) == 1 and str(reads[0]).endswith(".part")  # the staged download, before it was kept
    BiLM.from_pretrained("small", progress=False)  # from the cache: one read
    assert len(reads) == 2 and Path(reads[1]) == hub.published_cache_paths("small")[0]


def test_by_url_matches_the_local_files(server, cache, parity_sentences):
    local = BiLM.from_hdf5(PARITY / "weights.hdf5", PARITY / "options.json")
    weights_url = f"{server.url}/bucket/{SMALL}/elmo_{SMALL}_weights.hdf5"
    # options guessed from the URL (_weights.hdf5 -> _options.json)
    assert_same_outputs(BiLM.from_pretrained(weights_url, progress=False), local, parity_sentences)
    assert loading.resolve(weights_url)[0] == hub.url_cache_path(weights_url)
    assert hub.url_cache_path(weights_url).parent.parent == cache / "urls"
    # explicit options: URL or local path
    other = f"{server.url}/bucket/{MEDIUM}/elmo_{MEDIUM}_weights.hdf5"
    allennlp = BiLM.from_hdf5(ALLENNLP / "lm_weights.hdf5", ALLENNLP / "options.json")
    by_url = BiLM.from_pretrained(other, f"{server.url}/bucket/{MEDIUM}/elmo_{MEDIUM}_options.json", progress=False)
    assert_same_outputs(by_url, allennlp, parity_sentences)
    with_local_options = BiLM.from_pretrained(other, ALLENNLP / "options.json", progress=False)
    assert_same_outputs(with_local_options, allennlp, parity_sentences)
    with pytest.raises(ValueError, match="options"):
        loading.resolve(f"{server.url}/bucket/{SMALL}/something.hdf5")
    server.stop()
    assert_same_outputs(BiLM.from_pretrained(weights_url, progress=False), local, parity_sentences)


def test_pipeline_by_name_and_url_then_saved_without_outside_files(
    server, cache, monkeypatch, tmp_path, parity_sentences, parity_reference
):
    monkeypatch.setenv(hub.MIRROR_ENV, f"{server.url}/bucket")

    def check(nlp):
        docs = [nlp(Doc(nlp.vocab, words=words)) for words in parity_sentences]
        for i, doc in enumerate(docs):
            for j in range(3):
                expected = parity_reference[f"single{i}_layer{j}"][0, 1 : len(doc) + 1]
                numpy.testing.assert_allclose(doc._.elmo.layers[j], expected, atol=1e-4, rtol=0)
        return docs

    # [initialize.components.elmo] weights = NAME, options omitted
    by_config = spacy.blank("en")
    by_config.add_pipe("elmo")
    by_config.config["initialize"]["components"]["elmo"] = {"weights": "small"}
    by_config.initialize()
    check(by_config)
    # the natural first guess: add_pipe(config={"weights": URL}), then initialize
    url = f"{server.url}/bucket/{SMALL}/elmo_{SMALL}_weights.hdf5"
    by_factory = spacy.blank("en")
    by_factory.add_pipe("elmo", config={"weights": url})
    assert by_factory.config["components"]["elmo"]["weights"] == url
    by_factory.initialize()
    expected = check(by_factory)
    # ... or used right away: loaded on first use
    first_use = spacy.blank("en")
    first_use.add_pipe("elmo", config={"weights": "small"})
    check(first_use)
    by_factory.to_disk(tmp_path / "pipeline")
    server.stop()
    shutil.rmtree(cache)  # neither the server nor the cache is needed to load
    loaded = spacy.load(tmp_path / "pipeline")
    for doc, words in zip(expected, parity_sentences):
        numpy.testing.assert_array_equal(loaded(Doc(loaded.vocab, words=words))._.elmo.layers, doc._.elmo.layers)
    assert not cache.exists()


# --------------------------------------------------------------- failures
def assert_offline_advice(message, name="small"):
    shape = hub.PUBLISHED_MODELS[name]
    assert "Nothing was cached" in message
    assert "by hand" in message and str(hub.cache_dir() / shape) in message
    assert hub.MIRROR_ENV in message and hub.PUBLISHED_BASE_URL in message
    assert f"elmo_{shape}_weights.hdf5" in message and f"elmo_{shape}_options.json" in message


def test_truncated_download_raises_one_clear_error_and_caches_nothing(server, cache, monkeypatch):
    monkeypatch.setenv(hub.MIRROR_ENV, f"{server.url}/truncated")
    with pytest.raises(DownloadError) as info:
        BiLM.from_pretrained("small", progress=False)
    message = str(info.value)
    assert f"{server.url}/truncated/{SMALL}/elmo_{SMALL}_weights.hdf5" in message
    assert "cut short" in message or "IncompleteRead" in message
    assert_offline_advice(message)
    assert files_in(cache) == []


@pytest.mark.parametrize(
    "name,what,problem",
    [
        ("small", "does not load as ELMo weights", "not an hdf5 file"),
        ("medium", "does not load as ELMo weights", "more than the options describe"),
        ("original", "the options do not load (the weights were not requested)", "not valid JSON"),
    ],
)
def test_corrupt_download_raises_one_clear_error_and_caches_nothing(server, cache, monkeypatch, name, what, problem):
    monkeypatch.setenv(hub.MIRROR_ENV, f"{server.url}/bucket/corrupt")
    with pytest.raises(DownloadError) as info:
        loading.download(name, progress=False)
    message = str(info.value)
    assert what in message and problem in message
    weights_url, options_url = hub.published_urls(name)
    assert (options_url if name == "original" else weights_url) in message and ".part" not in message
    assert_offline_advice(message, name)
    assert files_in(cache) == []
    # the command line's download goes through the same checks
    from typer.testing import CliRunner

    from spacy_elmo.cli import app

    result = CliRunner().invoke(app, ["download", name, "--no-progress"])
    assert result.exit_code == 2 and what in result.stderr and problem in result.stderr, result.output
    assert files_in(cache) == []


def test_missing_file_and_no_connection_give_the_offline_message(server, cache, monkeypatch):
    monkeypatch.setenv(hub.MIRROR_ENV, f"{server.url}/bucket")
    with pytest.raises(DownloadError, match="HTTP 404") as info:
        loading.download("original-5.5b", progress=False)
    assert_offline_advice(str(info.value), "original-5.5b")
    dead = free_port_url()
    monkeypatch.setenv(hub.MIRROR_ENV, dead)
    with pytest.raises(DownloadError) as info:
        BiLM.from_pretrained("small", progress=False)
    message = str(info.value)
    assert f"could not get {dead}/{SMALL}/elmo_{SMALL}_options.json: no connection" in message  # the options come first
    assert_offline_advice(message)
    with pytest.raises(DownloadError, match="give their local paths") as info:
        BiLM.from_pretrained(f"{dead}/x_weights.hdf5", progress=False)
    assert f"{dead}/x_options.json" in str(info.value)
    assert files_in(cache) == []


def test_files_put_in_the_cache_by_hand_are_used_offline(cache, no_network, monkeypatch, parity_sentences):
    monkeypatch.setenv(hub.MIRROR_ENV, free_port_url())
    _bucket_dir(cache, SMALL, PARITY / "weights.hdf5", PARITY / "options.json")
    local = BiLM.from_hdf5(PARITY / "weights.hdf5", PARITY / "options.json")
    assert_same_outputs(BiLM.from_pretrained("small"), local, parity_sentences)


def test_a_mirror_can_be_a_local_directory(tmp_path, cache, parity_sentences, monkeypatch):
    _bucket_dir(tmp_path / "copy", SMALL, PARITY / "weights.hdf5", PARITY / "options.json")
    monkeypatch.setenv(hub.MIRROR_ENV, str(tmp_path / "copy"))
    local = BiLM.from_hdf5(PARITY / "weights.hdf5", PARITY / "options.json")
    assert_same_outputs(BiLM.from_pretrained("small", progress=False), local, parity_sentences)
    assert (cache / SMALL / f"elmo_{SMALL}_weights.hdf5").exists()


CONCURRENT = """
import sys, time
from pathlib import Path
from spacy_elmo import loading
ready, started = Path(sys.argv[1]), Path(sys.argv[2])
ready.joinpath(sys.argv[3]).touch()
deadline = time.time() + 120
while len(list(ready.iterdir())) < 2 and time.time() < deadline:
    time.sleep(0.01)
start = time.time()
started.joinpath(sys.argv[3]).touch()  # the server holds every download until both are here
weights, options = loading.download("small", progress=False)
end = time.time()
loading.check_files(weights, options)
print(weights, start, end)
"""


def test_two_processes_downloading_at_once_end_with_one_good_file(server, cache, tmp_path, parity_sentences):
    ready, started = tmp_path / "ready", tmp_path / "started"
    ready.mkdir()
    started.mkdir()
    server.hold_until(lambda: len(list(started.iterdir())) == 2)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        hub.CACHE_ENV: str(cache),
        hub.MIRROR_ENV: f"{server.url}/slow",
    }
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CONCURRENT, str(ready), str(started), str(i)],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for i in range(2)
    ]
    results = [proc.communicate(timeout=300) for proc in procs]
    for proc, (out, err) in zip(procs, results):
        assert proc.returncode == 0, err
    lines = [out.split() for out, _ in results]
    starts, ends = [float(line[1]) for line in lines], [float(line[2]) for line in lines]
    assert max(starts) < min(ends)  # the two downloads overlap: the server held them until both began
    paths = {line[0] for line in lines}
    assert paths == {str(cache / SMALL / f"elmo_{SMALL}_weights.hdf5")}
    assert files_in(cache) == sorted(
        [SMALL, f"{SMALL}/elmo_{SMALL}_options.json", f"{SMALL}/elmo_{SMALL}_weights.hdf5"]
    )
    assert (cache / SMALL / f"elmo_{SMALL}_weights.hdf5").read_bytes() == (PARITY / "weights.hdf5").read_bytes()
    if hub.transport.fcntl is not None:  # the second process waited for the first and downloaded nothing
        assert sorted(server.requests) == sorted(f"/slow/{SMALL}/{name}" for name in hub.published_files("small"))


def test_without_a_lock_two_downloads_still_end_with_one_good_file(server, cache, monkeypatch):
    monkeypatch.setattr(hub.transport, "fcntl", None)
    monkeypatch.setenv(hub.MIRROR_ENV, f"{server.url}/slow")
    results, errors = [], []

    def run():
        try:
            results.append(loading.download("small", progress=False))
        except Exception as err:  # pragma: no cover - reported below
            errors.append(err)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors and len(results) == 2 and results[0] == results[1]
    assert files_in(cache) == sorted(
        [SMALL, f"{SMALL}/elmo_{SMALL}_options.json", f"{SMALL}/elmo_{SMALL}_weights.hdf5"]
    )
    loading.check_files(*results[0])


# ------------------------------------------------- the shipped default, paths
@pytest.fixture
def shipped(tmp_path, monkeypatch):
    """The shipped English model, played by a copy of the parity fixture."""
    folder = tmp_path / "models" / "english"
    folder.mkdir(parents=True)
    shutil.copy(PARITY / "weights.hdf5", folder / "weights.hdf5")
    shutil.copy(PARITY / "options.json", folder / "options.json")
    monkeypatch.setattr(hub.names, "SHIPPED_MODEL_DIR", folder)
    return folder


def test_the_default_is_the_shipped_model_offline(shipped, cache, no_network, parity_sentences, parity_reference):
    local = BiLM.from_hdf5(PARITY / "weights.hdf5", PARITY / "options.json")
    for name in (None, "english", "default", "English"):
        assert hub.resolve(name) == (shipped / "weights.hdf5", shipped / "options.json")
    assert_same_outputs(BiLM.from_pretrained(), local, parity_sentences)
    # no config at all
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo")
    nlp.initialize()
    doc = nlp(Doc(nlp.vocab, words=parity_sentences[0]))
    numpy.testing.assert_allclose(
        doc._.elmo.layers[2], parity_reference["single0_layer2"][0, 1 : len(doc) + 1], atol=1e-4, rtol=0
    )
    # used before initialize: loaded on first use
    first = spacy.blank("en")
    first.add_pipe("elmo")
    numpy.testing.assert_array_equal(
        first(Doc(first.vocab, words=parity_sentences[0]))._.elmo.layers, doc._.elmo.layers
    )
    from spacy_elmo import add_elmo

    notebook = spacy.blank("en")
    add_elmo(notebook)
    numpy.testing.assert_array_equal(
        notebook(Doc(notebook.vocab, words=parity_sentences[0]))._.elmo.layers, doc._.elmo.layers
    )
    assert files_in(cache) == []


def test_no_shipped_model_says_where_to_get_weights(tmp_path, monkeypatch):
    monkeypatch.setattr(hub.names, "SHIPPED_MODEL_DIR", tmp_path / "missing")
    with pytest.raises(ModelNotFoundError) as info:
        BiLM.from_pretrained()
    message = str(info.value)
    for part in (
        "small",
        "original-5.5b",
        "python -m spacy_elmo download",
        "initialize.components.elmo",
        "weights.hdf5",
    ):
        assert part in message


def test_local_paths(tmp_path, no_network, parity_sentences):
    local = BiLM.from_hdf5(PARITY / "weights.hdf5", PARITY / "options.json")
    # a directory (what `python -m spacy_elmo export` writes), a weights file with
    # its options beside it, a Path named like a model name
    assert hub.resolve(str(PARITY)) == (PARITY / "weights.hdf5", PARITY / "options.json")
    assert hub.resolve(PARITY / "weights.hdf5") == (PARITY / "weights.hdf5", PARITY / "options.json")
    assert hub.resolve(str(ALLENNLP / "lm_weights.hdf5")) == (ALLENNLP / "lm_weights.hdf5", ALLENNLP / "options.json")
    assert hub.resolve(ALLENNLP) == (ALLENNLP / "lm_weights.hdf5", ALLENNLP / "options.json")
    published = tmp_path / "small"
    _bucket_dir(tmp_path, SMALL, PARITY / "weights.hdf5", PARITY / "options.json")
    shutil.copytree(tmp_path / SMALL, published)
    assert hub.resolve(published)[0] == published / f"elmo_{SMALL}_weights.hdf5"
    assert_same_outputs(BiLM.from_pretrained(published / f"elmo_{SMALL}_weights.hdf5"), local, parity_sentences)
    with pytest.raises(ModelNotFoundError, match="neither a model name") as info:
        hub.resolve("smal")
    assert "original-5.5b" in str(info.value)
    with pytest.raises(ValueError, match="leave options out"):
        hub.resolve("small", "options.json")
    lonely = tmp_path / "lonely.hdf5"
    shutil.copy(PARITY / "weights.hdf5", lonely)
    with pytest.raises(ValueError, match="give options"):
        hub.resolve(lonely)


def test_cli_download_and_embed(server, shipped, cache, monkeypatch, tmp_path):
    from typer.testing import CliRunner

    from spacy_elmo.cli import app

    runner = CliRunner()
    monkeypatch.setenv(hub.MIRROR_ENV, f"{server.url}/bucket")
    result = runner.invoke(app, ["download", "small", "--no-progress"])
    assert result.exit_code == 0, result.output
    weights, options = hub.published_cache_paths("small")
    assert f"weights: {weights}" in result.output and f"options: {options}" in result.output
    result = runner.invoke(app, ["download", "large"])
    assert result.exit_code == 2 and "neither a model name" in result.output
    text = "The bank of the river flooded .\nShe opened a bank account !\n"
    default = runner.invoke(app, ["embed"], input=text)
    assert default.exit_code == 0, default.output
    assert "token vector norms" in default.output and "(3, 7, 48)" in default.output
    for args in (["small"], [str(PARITY / "weights.hdf5"), "--options", str(PARITY / "options.json")], [str(PARITY)]):
        result = runner.invoke(app, ["embed", "--model", *args], input=text)
        assert result.exit_code == 0, result.output
        assert result.output == default.output
    result = runner.invoke(app, ["embed", "--model", "smal"], input=text)
    assert result.exit_code == 2 and "neither a model name" in result.output


@pytest.mark.parametrize("portal", ["portal", "portal/typed"])
@pytest.mark.parametrize("name", ["small", "efml:de"])
def test_a_mirror_answering_a_web_page_is_refused_everywhere(server, cache, monkeypatch, portal, name):
    """A captive portal answers every URL with a login page (status 200,
    typed text/html or not): the command line's download refuses it as the
    Python API does (exit 2, one error line), and nothing is cached."""
    from typer.testing import CliRunner

    from spacy_elmo.cli import app
    from spacy_elmo.hub import families

    monkeypatch.setenv(hub.MIRROR_ENV, f"{server.url}/{portal}")
    monkeypatch.setenv(families.NLPL_MIRROR_ENV, f"{server.url}/{portal}")
    result = CliRunner().invoke(app, ["download", name, "--no-progress"])
    assert result.exit_code == 2, result.output
    assert "the server answered with a web page" in result.stderr and "Nothing was cached" in result.stderr
    with pytest.raises(DownloadError, match="answered with a web page"):
        BiLM.from_pretrained(name, progress=False)
    assert [p for p in files_in(cache) if not p.endswith(".lock")] == []


def test_a_stale_cache_entry_that_points_elsewhere_says_how_to_clear_it(cache, tmp_path):
    """A published model put in the cache by hand as links, the weights'
    link now pointing at other weights: the error says where the entry is,
    that it is a link and to what, and how to clear it."""
    weights, options = hub.published_cache_paths("small")
    weights.parent.mkdir(parents=True)
    options.write_bytes((PARITY / "options.json").read_bytes())
    weights.symlink_to(ALLENNLP / "lm_weights.hdf5")  # other weights, options that do not fit them
    with pytest.raises(ValueError) as info:
        BiLM.from_pretrained("small", progress=False)
    message = str(info.value)
    assert f"{weights} is in the cache, through {weights}, a link to {ALLENNLP / 'lm_weights.hdf5'}" in message
    assert f"remove it (rm -r {weights.parent}) and it is downloaded again" in message
