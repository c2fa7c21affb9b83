"""efml:/nlpl: names through a local server laid out like the NLPL
repository, NLPL bilm-tf zips (n_characters 261), and safe unpacking."""
import json
import shutil
import stat
import zipfile

import numpy
import pytest
from typer.testing import CliRunner

from spacy_elmo import BiLM, hub
from spacy_elmo.hub import families as hub_families
from spacy_elmo.hub.families import UnsafeArchiveError
from tests.helpers.models import nlpl_bilm_tf_dir, zip_dir
from tests.helpers.paths import FIXTURES
from tests.helpers.server import Server

EFML = FIXTURES / "efml"


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
    with pytest.raises(UnsafeArchiveError, match="declare 5,000 bytes unpacked, more than the 1,000"):
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


def test_declared_sizes_and_free_space_are_checked_before_unpacking(tmp_path, monkeypatch):
    """A zip bomb's headers tell its size: refused before a byte is written,
    by the bound and by the free disk space; a member that holds more than
    it declares is refused while writing."""
    bomb = tmp_path / "bomb.zip"
    with zipfile.ZipFile(bomb, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("zeros", b"\0" * 5_000_000)
    assert bomb.stat().st_size < 100_000
    monkeypatch.setattr(hub_families, "MAX_UNPACKED_BYTES", 1_000_000)
    with pytest.raises(UnsafeArchiveError, match="declare 5,000,000 bytes unpacked, more than the 1,000,000"):
        hub_families.safe_unpack(bomb, tmp_path / "t1")
    with pytest.raises(UnsafeArchiveError, match="declare 5,000,000 bytes"):
        hub_families.check_zip(bomb)
    assert not (tmp_path / "t1" / "zeros").exists()
    monkeypatch.setattr(hub_families, "MAX_UNPACKED_BYTES", 8 << 30)
    real = shutil.disk_usage

    def little_room(path):
        return real(path)._replace(free=1_000_000)

    monkeypatch.setattr(shutil, "disk_usage", little_room)
    (tmp_path / "t2").mkdir()
    message = "unpacks to 5,000,000 bytes .* 1,000,000 bytes free; nothing was unpacked"
    with pytest.raises(UnsafeArchiveError, match=message):
        hub_families.safe_unpack(bomb, tmp_path / "t2")
    assert list((tmp_path / "t2").iterdir()) == []


def test_a_zip_bomb_by_url_is_refused_before_unpacking(nlpl_server, cache, monkeypatch, tmp_path):
    """The way efml:/nlpl: names arrive: the download fits, the declared
    unpacked size does not fit the disk; one error, nothing cached."""
    root = nlpl_server.httpd.root
    with zipfile.ZipFile(root / "11" / "160.zip", "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("config.json", "{}")
        zf.writestr("encoder.pkl", b"\0" * 20_000_000)
    real = shutil.disk_usage
    monkeypatch.setattr(shutil, "disk_usage", lambda path: real(path)._replace(free=5_000_000))
    with pytest.raises(
        hub.DownloadError, match=r"unpacks to 20,000,002 bytes .*5,000,000 bytes free.*Nothing was cached"
    ):
        BiLM.from_pretrained("efml:ja", progress=False)
    left = [p.name for p in (cache / "nlpl" / "11").iterdir()] if (cache / "nlpl" / "11").exists() else []
    assert [name for name in left if not name.endswith(".lock")] == []


@pytest.mark.parametrize(
    "name",
    [
        "nlpl:\u00b2",
        "nlpl:\u0663",
        "nlpl:1/2/3",
        "nlpl:-1",
        "nlpl:1234567",
        "nlpl:" + "9" * 100_000,
        "efml:" + "x" * 100_000,
    ],
)
def test_odd_nlpl_ids_get_a_bounded_clear_message(name, cache):
    with pytest.raises(hub.ModelNotFoundError, match="is not an NLPL name|no ELMoForManyLangs model") as info:
        hub.resolve(name, progress=False)
    assert len(str(info.value)) < 600


def test_a_zip_with_two_members_of_one_name_is_refused(tmp_path, cache):
    """Which config.json is the model's? Refused by name, before anything
    is unpacked (also at add_pipe, which reads only the listing)."""
    import warnings

    import spacy

    archive = tmp_path / "model.zip"
    with zipfile.ZipFile(archive, "w") as zf, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns about the duplicate it writes
        for path in sorted((EFML / "with_words").iterdir()):
            zf.write(path, path.name)
        zf.writestr("CONFIG.json", "{}")
    with pytest.raises(UnsafeArchiveError, match="holds two members named 'CONFIG.json'.*differ only in case"):
        BiLM.from_pretrained(str(archive))
    with pytest.raises(UnsafeArchiveError, match="holds two members named"):
        spacy.blank("en").add_pipe("elmo", config={"weights": str(archive)})
    assert (
        not (cache / "zips").exists() or [p for p in (cache / "zips").iterdir() if not p.name.endswith(".lock")] == []
    )
