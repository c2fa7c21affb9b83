"""The elmo component's settings are checked where they are given, each
error naming the setting: ``mix`` (its form at ``add_pipe``, its length as
soon as the biLM is known) and every thread count the package takes."""
import json

import pytest
import spacy
from typer.testing import CliRunner

from spacy_elmo import add_elmo
from spacy_elmo.bilm.threads import MAX_THREADS
from spacy_elmo.cli import app
from tests.helpers.models import random_model

MIX_SETTING = r"mix \(\[components\.elmo\] mix\)"


@pytest.mark.parametrize(
    "mix,message",
    [
        ([], MIX_SETTING + " must be null"),
        ([0.0] * 65, MIX_SETTING + " must be null"),
        ("top", r"elmo -> mix"),  # spaCy's own check of the types names it
        ([True, 0, 0], r"elmo -> mix"),
    ],
)
def test_a_mix_of_the_wrong_form_stops_add_pipe(mix, message):
    nlp = spacy.blank("en")
    with pytest.raises(ValueError, match=message):
        nlp.add_pipe("elmo", config={"mix": mix})


def test_a_mix_of_the_wrong_length_stops_initialize_and_add_elmo():
    """The random biLM has 3 layers (0..2)."""
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"mix": [0.5, 0.5]})
    message = MIX_SETTING + r" gives 2 weights, but the biLM has 3 layers \(0\.\.2\).*\[0, 0, 1\]"
    with pytest.raises(ValueError, match=message):
        nlp.get_pipe("elmo").set_bilm(random_model(0))
    with pytest.raises(ValueError, match=MIX_SETTING + " gives 2 weights"):
        nlp.initialize()  # the shipped biLM has 3 layers too
    other = spacy.blank("en")
    with pytest.raises(ValueError, match=MIX_SETTING + " gives 4 weights"):
        add_elmo(other, bilm=random_model(0), config={"mix": [0.25] * 4})
    assert other.pipe_names == []  # refused, nlp left as it was
    with pytest.raises(ValueError, match=MIX_SETTING + " gives 2 weights"):
        nlp("first use before initialize loads the biLM")


def test_a_saved_mix_of_the_wrong_length_is_named_on_load(tmp_path):
    nlp = spacy.blank("en")
    add_elmo(nlp, bilm=random_model(0), config={"mix": [0.0, 0.0, 1.0]})
    nlp.to_disk(tmp_path / "nlp")
    cfg = tmp_path / "nlp" / "elmo" / "cfg"
    cfg.write_text(json.dumps(dict(json.loads(cfg.read_text()), mix=[1.0, 0.0])))
    with pytest.raises(ValueError, match=rf"elmo.cfg: the elmo component's {MIX_SETTING} gives 2 weights"):
        spacy.load(tmp_path / "nlp")


@pytest.mark.parametrize("threads", [MAX_THREADS + 1, 1000, 10**6])
def test_the_component_threads_are_bounded(threads):
    nlp = spacy.blank("en")
    message = rf"\[components\.elmo\.model\] threads\) must be a whole number of threads from 1 to {MAX_THREADS}"
    with pytest.raises(ValueError, match=message):
        nlp.add_pipe("elmo", config={"model": {"threads": threads}})
    nlp.add_pipe("elmo", config={"model": {"threads": 2}})  # within the bound


def test_pretrain_threads_are_bounded(tmp_path):
    result = CliRunner().invoke(app, ["pretrain", str(tmp_path / "corpus"), "--output", str(tmp_path / "out"),
                                      "--threads", "1000", "--no-progress"])
    assert result.exit_code == 2, result.output
    assert f"--threads must be a whole number of threads from 1 to {MAX_THREADS}" in result.output
    assert "Traceback" not in result.output and not (tmp_path / "out").exists()


def test_export_never_writes_over_its_input(tmp_path):
    """export's TARGET and --nlp: not the source, not the directory that holds
    the source's weights under the name export writes, not each other."""
    from tests.helpers.paths import PARITY

    model = tmp_path / "model"
    model.mkdir()
    for name in ("weights.hdf5", "options.json"):
        (model / name).write_bytes((PARITY / name).read_bytes())
    before = (model / "weights.hdf5").read_bytes()

    def export(*args):
        return CliRunner().invoke(app, ["export", *[str(a) for a in args]])

    for args in ((model, model), (model / "weights.hdf5", model), (model, tmp_path / "out", "--nlp", model)):
        result = export(*args)
        assert result.exit_code == 2 and "would overwrite its input" in result.output, result.output
    result = export(model, tmp_path / "same", "--nlp", tmp_path / "same")
    assert result.exit_code == 2 and "TARGET and --nlp are one directory" in result.output, result.output
    assert (model / "weights.hdf5").read_bytes() == before
    assert sorted(p.name for p in model.iterdir()) == ["options.json", "weights.hdf5"]
    result = export(model, tmp_path / "out")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "out" / "weights.hdf5").is_file()
