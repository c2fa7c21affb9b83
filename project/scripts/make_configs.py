"""Write the project's training configs: one per (system, task).

    python scripts/make_configs.py configs

Each config is a partial config below, completed with spaCy's defaults by
``spacy init fill-config`` (the same function), so what is committed under
``configs/`` is explicit and what ``spacy train`` runs. Choices shared by
every system (so that only the token representation differs):

- corpora read with ``gold_preproc = true``: the gold tokens (Brown, WNUT)
  are the ones the model sees, in training and evaluation;
- ``spacy.batch_by_words.v1`` with spaCy's default compounding size
  (100 -> 1000 words), dropout 0.1, Adam; the learning rate is spaCy's
  default per system (0.001; the transformer: ``warmup_linear`` over
  ``max_steps``, 250 warm-up steps, to spaCy's transformer default of 5e-5,
  except where a dev pilot showed it does not learn in the budget:
  ``TRANSFORMER_RATE``);
- ``max_steps``, ``eval_frequency``, ``patience`` and ``seed`` are the
  defaults below and are overridden per run by ``scripts/run_grid.py``
  from the project's vars (the same for every system of a task);
- the task heads are spaCy's defaults: ``spacy.Tagger.v2``;
  ``spacy.TransitionBasedParser.v2`` (hidden 64, maxout 2) for NER;
  for text classification ``spacy.TextCatReduce.v1`` (mean and max pooling
  of the token vectors, softmax): ``spacy init config -p textcat`` emits a
  bag-of-words model without any token representation (nothing to compare)
  and ``-o accuracy`` an ensemble whose bag-of-words half would be the same
  in every system; the pooled head is what spaCy's transformer default
  (``TextCatCNN.v2`` = reduce-mean) uses.

Systems (the ``tok2vec`` of the task's component):

- ``baseline``: spaCy's own ``tok2vec`` as ``spacy init config`` writes it
  (efficiency: MultiHashEmbed NORM/PREFIX/SUFFIX/SHAPE, width 96, rows
  5000/1000/2500/2500; MaxoutWindowEncoder depth 4, window 1; no static
  vectors), shared through ``spacy.Tok2VecListener.v1``;
- ``elmo_listener``: ``spacy_elmo.ElmoListener.v1``, the component's own
  scalar mix of the frozen biLM's layers, dropout 0.1, projected to 256;
- ``elmo_tok2vec``: ``spacy_elmo.ElmoTok2Vec.v1``, the paper's
  ``[x_k; ELMo_k]`` into a trainable encoder, with the baseline's
  embedding and encoder (so it is the baseline plus ELMo at the input);
- ``transformer``: spacy-transformers with MiniLM-L6 (``paths.transformer``,
  a local Hugging Face directory), fine-tuned (``grad_factor = 1``),
  word pieces mean-pooled per token, strided spans 128/96.
"""
from pathlib import Path

import typer

TASKS = {
    "pos": ("tagger", """
[components.tagger]
factory = "tagger"

[components.tagger.model]
@architectures = "spacy.Tagger.v2"
nO = null
normalize = false
"""),
    "ner": ("ner", """
[components.ner]
factory = "ner"

[components.ner.model]
@architectures = "spacy.TransitionBasedParser.v2"
state_type = "ner"
extra_state_tokens = false
hidden_width = 64
maxout_pieces = 2
use_upper = true
nO = null
"""),
    "sentiment": ("textcat", """
[components.textcat]
factory = "textcat"

[components.textcat.model]
@architectures = "spacy.TextCatReduce.v1"
exclusive_classes = true
use_reduce_first = false
use_reduce_last = false
use_reduce_max = true
use_reduce_mean = true
nO = null
"""),
}

TOK2VEC_EMBED = """
@architectures = "spacy.MultiHashEmbed.v2"
width = 96
attrs = ["NORM", "PREFIX", "SUFFIX", "SHAPE"]
rows = [5000, 1000, 2500, 2500]
include_static_vectors = false
"""
TOK2VEC_ENCODE = """
@architectures = "spacy.MaxoutWindowEncoder.v2"
width = 96
depth = 4
window_size = 1
maxout_pieces = 3
"""

ELMO_COMPONENT = """
[components.elmo]
factory = "elmo"
store = "layers"
dtype = "float32"
mix = null
frozen = false

[components.elmo.model]
@architectures = "spacy_elmo.ElmoBiLM.v2"
batch_size = 64
precision = "fp32"

[components.elmo.model.span_getter]
@span_getters = "spacy_elmo.sent_or_strided_spans.v1"
window = 128
stride = 96

[initialize.components.elmo]
weights = ${paths.elmo_weights}
options = ${paths.elmo_options}

[initialize.after_init]
@callbacks = "spacy_elmo.training_cache.v1"
max_mib = ${paths.elmo_cache_mib}
"""

SYSTEMS = {
    "baseline": (
        ["tok2vec"],
        "",
        """
[components.tok2vec]
factory = "tok2vec"

[components.tok2vec.model]
@architectures = "spacy.Tok2Vec.v2"

[components.tok2vec.model.embed]
"""
        + TOK2VEC_EMBED
        + """
[components.tok2vec.model.encode]
"""
        + TOK2VEC_ENCODE
        + """
[components.{c}.model.tok2vec]
@architectures = "spacy.Tok2VecListener.v1"
width = ${components.tok2vec.model.encode.width}
upstream = "tok2vec"
""",
    ),
    "elmo_listener": (
        ["elmo"],
        "elmo_weights = null\nelmo_options = null\nelmo_cache_mib = 4096\n",
        ELMO_COMPONENT
        + """
[components.{c}.model.tok2vec]
@architectures = "spacy_elmo.ElmoListener.v1"
upstream = "elmo"
grad_factor = 0.0
layer_norm = false
l2 = 0.0
dropout = 0.1
width = 256
""",
    ),
    "elmo_tok2vec": (
        ["elmo"],
        "elmo_weights = null\nelmo_options = null\nelmo_cache_mib = 4096\n",
        ELMO_COMPONENT
        + """
[components.{c}.model.tok2vec]
@architectures = "spacy_elmo.ElmoTok2Vec.v1"
upstream = "elmo"
grad_factor = 0.0
layer_norm = false
l2 = 0.0
dropout = 0.1
elmo_width = null
output_width = 0

[components.{c}.model.tok2vec.embed]
"""
        + TOK2VEC_EMBED
        + """
[components.{c}.model.tok2vec.encode]
"""
        + TOK2VEC_ENCODE,
    ),
    "transformer": (
        ["transformer"],
        'transformer = "assets/minilm"\n',
        """
[components.transformer]
factory = "transformer"
max_batch_items = 4096

[components.transformer.model]
@architectures = "spacy-transformers.TransformerModel.v3"
name = ${paths.transformer}
mixed_precision = false

[components.transformer.model.get_spans]
@span_getters = "spacy-transformers.strided_spans.v1"
window = 128
stride = 96

[components.transformer.model.tokenizer_config]
use_fast = true

[components.{c}.model.tok2vec]
@architectures = "spacy-transformers.TransformerListener.v1"
grad_factor = 1.0
upstream = "transformer"

[components.{c}.model.tok2vec.pooling]
@layers = "reduce_mean.v1"

[training.optimizer.learn_rate]
@schedules = "warmup_linear.v1"
warmup_steps = 250
total_steps = ${training.max_steps}
initial_rate = {rate}
""",
    ),
}

#: MiniLM's peak learning rate per task: spaCy's transformer default (5e-5)
#: unless a dev pilot showed that it does not learn within the budget
#: (project/README.md, "MiniLM's learning rate").
TRANSFORMER_RATE = {"pos": "2e-04", "ner": "2e-04", "sentiment": "5e-05"}

HEADER = """# {system} / {task}: written by scripts/make_configs.py (see its docstring
# for the choices), then filled with spaCy's defaults. Run through
# scripts/run_grid.py, which sets paths, seed, max_steps, eval_frequency and
# patience from project.yml's vars; by hand:
#   python -m spacy train configs/{system}_{task}.cfg \\
#     --paths.train corpus/{corpus}/train.spacy --paths.dev corpus/{corpus}/dev.spacy{extra}
"""

BASE = """
[paths]
train = null
dev = null
log = null
{paths}
[system]
seed = 0
gpu_allocator = null

[nlp]
lang = "en"
pipeline = {pipeline}
batch_size = 128

[corpora]

[corpora.train]
@readers = "spacy.Corpus.v1"
path = ${{paths.train}}
gold_preproc = true
max_length = 0
limit = 0

[corpora.dev]
@readers = "spacy.Corpus.v1"
path = ${{paths.dev}}
gold_preproc = true
max_length = 0
limit = 0

[training]
seed = ${{system.seed}}
gpu_allocator = ${{system.gpu_allocator}}
dropout = 0.1
accumulate_gradient = 1
max_steps = 2000
max_epochs = 0
eval_frequency = 200
patience = 1000

[training.batcher]
@batchers = "spacy.batch_by_words.v1"
discard_oversize = false
tolerance = 0.2

[training.batcher.size]
@schedules = "compounding.v1"
start = 100
stop = 1000
compound = 1.001

[training.optimizer]
@optimizers = "Adam.v1"

[training.logger]
@loggers = "spacy_elmo.JsonlLogger.v1"
path = ${{paths.log}}
console_output = true

[initialize]

[initialize.components]

[components]
"""

CORPUS = {"pos": "brown", "ner": "wnut", "sentiment": "sentiment"}


def build(system: str, task: str) -> str:
    component, head = TASKS[task]
    upstream, paths, block = SYSTEMS[system]
    pipeline = "[" + ", ".join(f'"{n}"' for n in upstream + [component]) + "]"
    text = BASE.format(paths=paths, pipeline=pipeline) + head + block.replace("{c}", component)
    if system == "transformer":
        text = text.replace("{rate}", TRANSFORMER_RATE[task])
    return text


def write(system: str, task: str, output_dir: Path) -> Path:
    """Fill ``build(system, task)`` with spaCy's defaults into ``output_dir``."""
    from spacy.cli.init_config import fill_config
    from thinc.api import Config

    import spacy_elmo.component.elmo  # noqa: F401

    if system == "transformer":
        import spacy_transformers  # noqa: F401
    partial = output_dir / f".{system}_{task}.partial.cfg"
    partial.write_text(build(system, task), encoding="utf-8")
    path = output_dir / f"{system}_{task}.cfg"
    fill_config(path, partial, silent=True)
    partial.unlink()
    extra = {
        "baseline": "",
        "transformer": " \\\n#     --paths.transformer assets/minilm",
    }.get(system, " \\\n#     --paths.elmo_weights WEIGHTS.hdf5 --paths.elmo_options OPTIONS.json")
    header = HEADER.format(system=system, task=task, corpus=CORPUS[task], extra=extra)
    path.write_text(header + path.read_text(encoding="utf-8"), encoding="utf-8")
    Config().from_disk(path)  # parses
    return path


def main(output_dir: Path = typer.Argument(Path("configs"), help="Where to write <system>_<task>.cfg")) -> None:
    output_dir.mkdir(parents=True, exist_ok=True)
    for system in SYSTEMS:
        for task in TASKS:
            typer.echo(f"wrote {write(system, task, output_dir)}")


if __name__ == "__main__":
    typer.run(main)
