"""run_grid.speed: words/s over the whole stream, not spaCy's mean of per-batch rates."""
import time

import spacy
from spacy.language import Language
from spacy.tokens import DocBin

from run_grid import speed

GROUP_DOCS = 32  # docs a buffering component collects before it works
GROUP_SECONDS = 0.2


class Buffering:
    """Works once per GROUP_DOCS docs (as the elmo component does per token
    buffer), then hands the group's docs out for free."""

    def __call__(self, doc):
        return next(self.pipe([doc]))

    def pipe(self, stream, batch_size=128):
        group = []
        for doc in stream:
            group.append(doc)
            if len(group) == GROUP_DOCS:
                time.sleep(GROUP_SECONDS)
                yield from group
                group = []
        if group:
            time.sleep(GROUP_SECONDS)
            yield from group


@Language.factory("test_buffering_component")
def make_buffering(nlp, name):
    return Buffering()


def test_speed_times_the_stream_of_a_buffering_pipeline(tmp_path):
    nlp = spacy.blank("en")
    docs = [nlp.make_doc(f"sentence number {i} has six words") for i in range(40)]
    DocBin(docs=docs).to_disk(tmp_path / "test.spacy")
    nlp.add_pipe("test_buffering_component")
    result = speed(nlp, tmp_path / "test.spacy", n_docs=40, batches=8, warmup_epochs=1, batch_size=8)
    # 8 x 8 = 64 docs of 6 words: two groups of 32, each one sleep.
    assert result["words"] == 64 * 6 and result["method"] == "stream"
    assert result["words_per_s"] == result["words"] / result["seconds"]
    assert result["seconds"] >= 2 * GROUP_SECONDS
    assert result["words_per_s"] <= result["words"] / (2 * GROUP_SECONDS)
    # spaCy's per-batch mean: one batch of four pays per group, the other three
    # are nearly free, so it overstates the stream's rate many times over.
    assert result["words_per_s_batch_mean"] > 3 * result["words_per_s"]
