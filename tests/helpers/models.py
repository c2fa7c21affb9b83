"""Small models and toy data shared by the tests."""
import json
import zipfile
from pathlib import Path

import srsly
import torch


def small_options(**changes):
    """A tiny but complete options dict in the published format."""
    options = {
        "lstm": {
            "use_skip_connections": True,
            "projection_dim": 8,
            "cell_clip": 3,
            "proj_clip": 3,
            "dim": 16,
            "n_layers": 2,
        },
        "char_cnn": {
            "activation": "relu",
            "filters": [[1, 4], [2, 4], [3, 8]],
            "n_highway": 1,
            "embedding": {"dim": 4},
            "n_characters": 262,
            "max_characters_per_token": 50,
        },
    }
    for path, value in changes.items():
        block, key = path.split(".", 1)
        if "." in key:
            sub, key = key.split(".")
            options[block][sub][key] = value
        else:
            options[block][key] = value
    return options


def random_model(seed=0, **changes):
    """A small biLM (see ``small_options``) with weights uniform in [-0.5, 0.5]."""
    from spacy_elmo import BiLM

    torch.manual_seed(seed)
    model = BiLM(small_options(**changes)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.uniform_(-0.5, 0.5)
        model.token_encoder.char_embedding.weight[0].zero_()
    return model


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
    from spacy_elmo import BiLM

    model = BiLM(small_options())
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


#: Toy training data of spaCy's overfitting tests (tagger, NER, textcat).
TAG_DATA = [
    ("I like green eggs", {"tags": ["N", "V", "J", "N"]}),
    ("Eat blue ham", {"tags": ["V", "J", "N"]}),
]
NER_DATA = [
    ("Who is Shaka Khan?", {"entities": [(7, 17, "PERSON")]}),
    ("I like London and Berlin.", {"entities": [(7, 13, "LOC"), (18, 24, "LOC")]}),
]
CAT_DATA = [
    ("I'm so happy.", {"cats": {"POSITIVE": 1.0, "NEGATIVE": 0.0}}),
    ("I'm so angry", {"cats": {"POSITIVE": 0.0, "NEGATIVE": 1.0}}),
]


def rewrite_saved_bilm(model_file: Path, edit) -> None:
    """Apply ``edit`` to the biLM fields of a saved elmo component."""
    msg = srsly.msgpack_loads(model_file.read_bytes())
    (node,) = [i for i, shims in enumerate(msg["shims"]) if shims]
    shim = srsly.msgpack_loads(msg["shims"][node][0])
    state = srsly.msgpack_loads(shim["state"])
    edit(state)
    shim["state"] = srsly.msgpack_dumps(state)
    msg["shims"][node][0] = srsly.msgpack_dumps(shim)
    model_file.write_bytes(srsly.msgpack_dumps(msg))


def tagger_config(tok2vec: dict) -> dict:
    """A small ``tagger`` component config over ``tok2vec``."""
    return {"model": {"@architectures": "spacy.Tagger.v2", "tok2vec": tok2vec}}


def ner_config(tok2vec: dict) -> dict:
    """A small ``ner`` component config over ``tok2vec``."""
    return {
        "model": {
            "@architectures": "spacy.TransitionBasedParser.v2",
            "state_type": "ner",
            "extra_state_tokens": False,
            "hidden_width": 32,
            "maxout_pieces": 2,
            "use_upper": True,
            "tok2vec": tok2vec,
        }
    }


def train(nlp, examples, steps, learn_rate, **update_kwargs):
    """``steps`` updates of ``nlp`` on ``examples``; returns each step's losses.
    Seeds python, numpy and torch first: initialisation must not depend on
    which tests ran before."""
    from spacy.util import fix_random_seed

    fix_random_seed(0)
    optimizer = nlp.initialize(get_examples=lambda: examples)
    optimizer.learn_rate = learn_rate
    history = []
    for _ in range(steps):
        losses = {}
        nlp.update(examples, sgd=optimizer, losses=losses, **update_kwargs)
        history.append(losses)
    return history
