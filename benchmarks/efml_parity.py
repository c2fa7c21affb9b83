"""Largest difference between this package and the reference package
(``elmoformanylangs`` 0.0.4.post2) on the committed fixture
(``tests/fixtures/efml``), per model, batch size and inference path.

    python benchmarks/efml_parity.py
"""
import json
from pathlib import Path

import numpy

from spacy_elmo.bilm.fast import InferenceEngine
from spacy_elmo.bilm.formats import efml

FIXTURE = Path(__file__).parent.parent / "tests" / "fixtures" / "efml"


def main() -> None:
    sentences = json.loads((FIXTURE / "sentences.json").read_text(encoding="utf-8"))
    with numpy.load(FIXTURE / "outputs.npz", allow_pickle=False) as data:
        reference = {key: data[key] for key in data.files}
    print("model       batch  path       max |ours - ref|  relative to max |ref|")
    for name in ("with_words", "chars_only"):
        for batch_size in (1, 3, 64):
            for path, engine in (("packed", dict(packed_weights=True)), ("unpacked", dict(packed_weights=False))):
                model = efml.load(FIXTURE / name).eval()
                model.engine = InferenceEngine("fp32", **engine)
                outputs = model.embed_sentences(sentences, batch_size=batch_size)
                diff = max(float(numpy.abs(o - reference[f"{name}/{i}"]).max()) for i, o in enumerate(outputs))
                scale = max(float(numpy.abs(reference[f"{name}/{i}"]).max()) for i in range(len(outputs)))
                print(f"{name:<11} {batch_size:>5}  {path:<9}  {diff:16.2e}  {diff / scale:.2e}")


if __name__ == "__main__":
    main()
