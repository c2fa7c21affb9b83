"""Fixtures of the hub's tests."""
import pytest

from spacy_elmo import hub
from spacy_elmo.hub import families


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty model cache under ``tmp_path``, with no mirror and the default
    download deadline, whatever the environment running the tests sets."""
    path = tmp_path / "cache"
    monkeypatch.setenv(hub.CACHE_ENV, str(path))
    for setting in (hub.MIRROR_ENV, families.NLPL_MIRROR_ENV, hub.DEADLINE_ENV):
        monkeypatch.delenv(setting, raising=False)
    return path
