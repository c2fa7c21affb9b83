"""split_semcor.py: whole documents go one way, keys follow their documents,
and both parts read back as the framework's format."""
import gzip

import pytest
import split_semcor

from spacy_elmo.senses.wsd import read_set


def write_semcor(folder, documents):
    """A SemCor-like set: ``documents`` of one sentence with one instance each."""
    texts, keys = [], []
    for d in range(documents):
        doc = f"semcor.d{d:03d}"
        texts.append(
            f'<text id="{doc}" source="br-x{d:02d}"><sentence id="{doc}.s00000"><wf>The</wf>'
            f'<instance id="{doc}.s00000.t000" lemma="bank" pos="NOUN">bank</instance><wf>.</wf></sentence></text>'
        )
        keys.append(f"{doc}.s00000.t000 bank%1:14:00::")
    data = folder / "semcor.data.xml.gz"
    xml = '<?xml version="1.0" encoding="UTF-8" ?>\n<corpus lang="en" source="semcor">' + "".join(texts) + "</corpus>\n"
    data.write_bytes(gzip.compress(xml.encode("utf-8")))
    (folder / "semcor.gold.key.txt.gz").write_bytes(gzip.compress(("\n".join(keys) + "\n").encode("utf-8")))
    return data


def test_every_nth_document_is_held_out_with_its_keys(tmp_path):
    data = write_semcor(tmp_path, 23)
    counts = split_semcor.split(data, tmp_path / "out", every=10)
    assert counts == {"semcor_train": 20, "semcor_heldout": 3}
    held = read_set(tmp_path / "out" / "semcor_heldout.data.xml")
    train = read_set(tmp_path / "out" / "semcor_train.data.xml")
    assert [i.id for i in held.instances] == [f"semcor.d{d:03d}.s00000.t000" for d in (0, 10, 20)]
    assert len(train.instances) == 20 and not {i.id for i in train.instances} & {i.id for i in held.instances}
    assert all(i.keys == ("bank%1:14:00::",) for i in held.instances)


def test_a_key_of_no_document_stops(tmp_path):
    data = write_semcor(tmp_path, 3)
    (tmp_path / "semcor.gold.key.txt.gz").write_bytes(gzip.compress(b"semcor.d099.s00000.t000 bank%1:14:00::\n"))
    with pytest.raises(SystemExit, match="names no document"):
        split_semcor.split(data, tmp_path / "out", every=2)
