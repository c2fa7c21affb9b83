"""efml:/nlpl: names through a local server laid out like the NLPL
repository, NLPL bilm-tf zips (n_characters 261), and safe unpacking."""
import json
import shutil
import stat
import zipfile
from pathlib import Path

import numpy
import pytest
import torch
from typer.testing import CliRunner

from spacy_elmo import BiLM, hub
from spacy_elmo.bilm.options import BiLMOptions
from spacy_elmo.hub import families as hub_families
from spacy_elmo.hub.families import UnsafeArchiveError
from tests.helpers.models import small_options
from tests.helpers.paths import FIXTURES
from tests.helpers.server import Server

EFML = FIXTURES / "efml"


def zip_dir(folder: Path, archive: Path, prefix: str = "") -> Path:
    archive.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(archive, "w") as zf:
        for path in sorted(folder.iterdir()):
            zf.write(path, prefix + path.name)
    return archive


def nlpl_bilm_tf_dir(tmp_path) -> tuple:
    """A tiny bilm-tf model laid out as NLPL zips are: model.hdf5,
    options.json with n_characters 261, vocab.txt, meta.json."""
    torch.manual_seed(3)
    model = BiLM(BiLMOptions.from_dict(small_options()))
    with torch.no_grad():
        for p in model.parameters():
            p.uniform_(-0.3, 0.3)
        model.token_encoder.char_embedding.weight[0].zero_()
    folder = tmp_path / "nlpl_model"
    folder.mkdir(parents=True)
    model.to_hdf5(folder / "model.hdf5", folder / "options.json")
    options = json.loads((folder / "options.json").read_text())
    options["char_cnn"]["n_characters"] = 261
    (folder / "options.json").write_text(json.dumps(options))
    (folder / "vocab.txt").write_text("<S>\n</S>\n<UNK>\nthe\n")
    (folder / "meta.json").write_text(json.dumps({"id": 210, "algorithm": {"name": "ELMo"}}))
    return folder, model


@pytest.fixture
def nlpl_server(tmp_path, monkeypatch, cache):
    root = tmp_path / "served"  # laid out like http://vectors.nlpl.eu/repository
    zip_dir(EFML / "with_words", root / "11" / "142.zip")  # efml:de
    zip_dir(EFML / "chars_only", root / "11" / "179.zip", prefix="zh_model/")  # efml:zh, one level down
    folder, _ = nlpl_bilm_tf_dir(tmp_path)
    zip_dir(folder, root / "20" / "210.zip")
    (root / "11" / "150.zip").write_bytes(b"not a zip at all")
    zip_dir(EFML / "with_words", root / "11" / "151.zip", prefix="../escape/")
    broken = tmp_path / "broken"  # an ELMoForManyLangs layout whose encoder.pkl is no state dict
    shutil.copytree(EFML / "with_words", broken)
    (broken / "encoder.pkl").write_bytes(b"not a pickle")
    zip_dir(broken, root / "11" / "153.zip")
    srv = Server(root).start()
    monkeypatch.setenv(hub_families.NLPL_MIRROR_ENV, srv.url + "/bucket")
    yield srv
    srv.stop()


def embed(model, sentences):
    return model.eval().embed_sentences(sentences)


def test_efml_names_follow_the_published_order():
    assert len(hub_families.EFML_LANGUAGES) == 44 == len(set(hub_families.EFML_LANGUAGES))
    assert hub_families.parse_name("efml:ar") == ("11", 136)
    assert hub_families.parse_name("efml:de") == ("11", 142)
    assert hub_families.parse_name("EFML:zh") == ("11", 179)
    assert hub_families.parse_name("nlpl:136") == ("11", 136)
    assert hub_families.parse_name("nlpl:210") == ("20", 210)
    assert hub_families.parse_name("nlpl:20/99") == ("20", 99)
    assert hub_families.parse_name("small") is None
    assert hub_families.name_url("11", 142) == "http://vectors.nlpl.eu/repository/11/142.zip"
    with pytest.raises(hub.ModelNotFoundError, match="no ELMoForManyLangs model for 'xx'"):
        hub_families.parse_name("efml:xx")


def test_efml_name_downloads_unpacks_and_then_works_offline(nlpl_server, cache, monkeypatch):
    sentences = json.loads((EFML / "sentences.json").read_text(encoding="utf-8"))
    reference = numpy.load(EFML / "outputs.npz")
    model = BiLM.from_pretrained("efml:de", progress=False)
    for i, array in enumerate(embed(model, sentences)):
        expected = reference[f"with_words/{i}"]
        assert numpy.abs(array - expected).max() <= 1e-5 * numpy.abs(expected).max()
    assert (cache / "nlpl" / "11" / "142" / "encoder.pkl").is_file()
    assert nlpl_server.requests == ["/bucket/11/142.zip"]
    assert not [p for p in (cache / "nlpl" / "11").iterdir() if p.name.startswith(".") and p.name != ".142.lock"]
    nlpl_server.stop()

    def refuse(*args, **kwargs):
        raise AssertionError("the network was used")

    monkeypatch.setattr("urllib.request.urlopen", refuse)
    again = BiLM.from_pretrained("efml:de", progress=False)
    numpy.testing.assert_array_equal(embed(again, sentences[:2])[1], embed(model, sentences[:2])[1])


def test_a_model_one_level_down_in_the_zip_is_found(nlpl_server, cache):
    folder, config = hub.resolve("efml:zh", progress=False)
    assert folder == cache / "nlpl" / "11" / "179" / "zh_model" and config.name == "config.json"


def test_nlpl_bilm_tf_zip_with_261_characters(nlpl_server, cache, tmp_path):
    _, original = nlpl_bilm_tf_dir(tmp_path / "again")
    model = BiLM.from_pretrained("nlpl:210", progress=False)
    assert json.loads((cache / "nlpl" / "20" / "210" / "options.json").read_text())["char_cnn"]["n_characters"] == 261
    sentences = [["Det", "var", "en", "gang", "."], ["Ёлка"]]
    for a, b in zip(embed(model, sentences), embed(original, sentences)):
        numpy.testing.assert_array_equal(a, b)
    # the unpacked directory and a local zip of it load the same way
    local = BiLM.from_pretrained(str(cache / "nlpl" / "20" / "210"))
    numpy.testing.assert_array_equal(embed(local, sentences)[0], embed(model, sentences)[0])


def test_cli_download_by_name(nlpl_server, cache):
    from spacy_elmo.cli import app

    result = CliRunner().invoke(app, ["download", "efml:de", "--no-progress"])
    assert result.exit_code == 0, result.output
    assert str(cache / "nlpl" / "11" / "142") in result.output


@pytest.mark.parametrize(
    "name, problem",
    [
        ("nlpl:150", "is not a zip file"),
        ("nlpl:151", "would be written outside the directory"),
        ("nlpl:152", "HTTP 404"),
    ],
)
def test_bad_zips_give_one_error_and_cache_nothing(nlpl_server, cache, tmp_path, name, problem):
    with pytest.raises(hub.DownloadError, match=problem) as info:
        hub.resolve(name, progress=False)
    assert "Nothing was cached" in str(info.value) and "unzip it into" in str(info.value)
    number = name.split(":")[1]
    assert not (cache / "nlpl" / "11" / number).exists()
    leftovers = [p.name for p in (cache / "nlpl" / "11").iterdir()] if (cache / "nlpl" / "11").exists() else []
    assert all(n.endswith(".lock") for n in leftovers) or not leftovers, leftovers
    assert not (tmp_path / "escape").exists() and not (cache / "nlpl" / "escape").exists()


def test_the_format_check_is_handed_in_by_the_loader(nlpl_server, cache):
    """The hub knows no weight format: with the loader's check a zip whose
    model does not load is refused and nothing is cached; the hub alone
    (no check) unpacks it."""
    from spacy_elmo import loading

    with pytest.raises(hub.DownloadError, match="does not hold a loadable ELMo model.*encoder.pkl"):
        loading.resolve("nlpl:153", progress=False)
    assert not (cache / "nlpl" / "11" / "153").exists()
    with pytest.raises(hub.DownloadError, match="encoder.pkl"):
        BiLM.from_pretrained("nlpl:153", progress=False)
    folder, _ = hub.resolve("nlpl:153", progress=False)
    assert folder == cache / "nlpl" / "11" / "153" and (folder / "encoder.pkl").read_bytes() == b"not a pickle"


def test_local_zip_is_unpacked_into_the_cache_once(cache, tmp_path):
    archive = zip_dir(EFML / "chars_only", tmp_path / "model.zip")
    first = hub.resolve(str(archive))
    second = hub.resolve(str(archive))
    assert first == second and first[0].parent == cache / "zips"


def _zip_with(tmp_path, entries):
    archive = tmp_path / "bad.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for info, data in entries:
            zf.writestr(info, data)
    return archive


def test_unpacking_refuses_escapes_links_and_oversize(tmp_path, monkeypatch):
    target = tmp_path / "target"
    for name in ("../x.txt", "/abs.txt", "a/../../x.txt", "C:/x.txt"):
        target.mkdir(exist_ok=True)
        with pytest.raises(UnsafeArchiveError, match="outside the directory"):
            hub_families.safe_unpack(_zip_with(tmp_path, [(name, b"x")]), target)
    link = zipfile.ZipInfo("link")
    link.external_attr = (stat.S_IFLNK | 0o777) << 16
    with pytest.raises(UnsafeArchiveError, match="is a link"):
        hub_families.safe_unpack(_zip_with(tmp_path, [(link, "/etc/passwd")]), tmp_path / "t2")
    monkeypatch.setattr(hub_families, "MAX_MEMBERS", 2)
    with pytest.raises(UnsafeArchiveError, match="holds 3 members, more than 2"):
        hub_families.safe_unpack(_zip_with(tmp_path, [(f"f{i}", b"x") for i in range(3)]), tmp_path / "t3")
    monkeypatch.setattr(hub_families, "MAX_UNPACKED_BYTES", 1000)
    with pytest.raises(UnsafeArchiveError, match="unpacks to more than 1,000 bytes"):
        hub_families.safe_unpack(_zip_with(tmp_path, [("big", b"\0" * 5000)]), tmp_path / "t4")
    assert not (tmp_path / "x.txt").exists()


def test_zip_downloads_check_the_cache_first(nlpl_server, cache, tmp_path, monkeypatch):
    """A broken cache entry where a zip unpacks is named with how to clear
    it, before any request, as for the other downloads."""
    folder = cache / "nlpl" / "11" / "142"
    folder.parent.mkdir(parents=True)
    folder.symlink_to(tmp_path / "gone")
    with pytest.raises(
        hub.CacheError,
        match=f"the cache entry {folder} is a symbolic link to .*gone, which does not exist; remove it \\(rm "
              f"{folder}\\)",
    ):
        BiLM.from_pretrained("efml:de", progress=False)
    folder.unlink()
    folder.write_bytes(b"a file where the unpacked model goes")
    with pytest.raises(
        hub.CacheError, match=f"the cache entry {folder} is not a directory; remove it \\(rm {folder}\\)"
    ):
        BiLM.from_pretrained("efml:de", progress=False)
    assert nlpl_server.requests == []
    folder.unlink()
    local = tmp_path / "model.zip"
    zip_dir(EFML / "with_words", local)
    monkeypatch.setenv(hub.CACHE_ENV, str(local))  # the cache setting names a file
    with pytest.raises(hub.CacheError, match=f"{hub.CACHE_ENV}={local}: {local} is a file, not a directory"):
        hub_families.resolve_local_zip(local)
    with pytest.raises(hub.CacheError, match="is a file, not a directory"):
        BiLM.from_pretrained("efml:de", progress=False)
    assert nlpl_server.requests == []
