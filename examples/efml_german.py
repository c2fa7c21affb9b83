"""spaCy with an ELMoForManyLangs biLM: German, by name or by directory.

    python examples/efml_german.py                     # efml:de, downloaded once
    python examples/efml_german.py PATH/TO/de_model    # a model directory or zip
    python examples/efml_german.py tests/fixtures/efml/with_words   # offline, tiny random model

It adds an ``elmo`` component to ``spacy.blank("de")``, prints the shape of
``Doc._.elmo`` (layers x tokens x dim) and, per token, the cosine similarity
of the context-dependent top layer of "Bank" in two sentences, then saves
the pipeline and loads it back: the biLM lives inside the saved pipeline.
"""
import sys
import tempfile

import numpy
import spacy

model = sys.argv[1] if len(sys.argv) > 1 else "efml:de"
nlp = spacy.blank("de")
nlp.add_pipe("elmo", config={"weights": model})
nlp.initialize()

river, money = nlp.pipe(["Wir saßen am Ufer auf einer Bank .", "Er hat Geld von der Bank geliehen ."])
print(f"Doc._.elmo: {river._.elmo.layers.shape} (layers, tokens, dim)")
vectors = [doc._.elmo.layers[-1][[t.text for t in doc].index("Bank")] for doc in (river, money)]
cosine = float(numpy.dot(*vectors) / (numpy.linalg.norm(vectors[0]) * numpy.linalg.norm(vectors[1])))
print(f"top layer, 'Bank' on a bench vs. at a bank: cosine {cosine:.3f}")
print(
    f"layer 0 (context-free) is the same in both: "
    f"{numpy.allclose(river._.elmo.layers[0][6], money._.elmo.layers[0][5])}"
)

with tempfile.TemporaryDirectory() as folder:
    nlp.to_disk(folder)
    before = nlp(river.text)._.elmo.layers
    after = spacy.load(folder)(river.text)._.elmo.layers
    same = numpy.allclose(before, after, rtol=0, atol=1e-5)
    print(f"the reloaded pipeline gives the same vectors (to float32 rounding): {same}")
