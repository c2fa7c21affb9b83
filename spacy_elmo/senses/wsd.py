"""All-words word sense disambiguation the ELMo paper's way (Peters et al.
2018, section 5.3, Table 5), on the files of Raganato, Camacho-Collados and
Navigli (2017), "Word Sense Disambiguation: A Unified Evaluation Framework
and Empirical Comparison".

The protocol
------------
1. Embed every sentence of the training corpus (SemCor) with the biLM,
   the tokens as the data gives them, and average the vectors of each
   WordNet 3.0 sense key, per layer: the sense *centroids*.
2. Label each test instance with the sense whose centroid is nearest by
   cosine, among the senses of the instance's lemma and part of speech
   seen in training. A lemma+POS with no sense seen in training takes
   WordNet's first sense (sense number 1 in ``index.sense``).
3. Score F1 per test set and per layer (0..L, and the mean of the layers)
   as the framework's scorer does: an instance is right when the answer is
   any of its gold keys; precision over the answered instances, recall
   over all of them (every instance is answered unless its lemma+POS is
   neither in training nor in the sense index, so P = R = F1 as a rule).

Baselines: WordNet's first sense for every instance, and the training
corpus's most frequent sense per lemma+POS (first sense where unseen).
Random weights of the model's shape (:func:`random_twin`) run the same
protocol.

Names and choices
-----------------
* **Tokens.** Each ``<wf>`` and ``<instance>`` is split on ``_`` and
  whitespace into biLM tokens: SemCor joins multiwords with ``_``
  ("took_place"), the framework's test sets with spaces ("pointed out"),
  and a biLM has seen neither joined. An instance's vector is the mean of
  its parts' vectors, per layer.
* **Lemma+POS.** A sense key names its own lemma and POS
  (``lemma%ss_type:...``, ss_type 1 NOUN, 2 VERB, 3 and 5 ADJ, 4 ADV); a
  training sense belongs to the lemma+POS of its key. A test instance's is
  its ``lemma`` (lower case, spaces as ``_``) and ``pos`` attributes. An
  instance with several gold keys adds its vector to each key's centroid
  and counts once for each in the most-frequent-sense counts.
* **Mean of the layers.** Instance and centroid alike are the plain mean
  of the L+1 layers (an ELMo mix with equal weights); the centroid of the
  mean is the mean of the layers' centroids.
* **Ties** (equal cosines, equal counts) go to the lower WordNet sense
  number, then to the sense key in string order: deterministic, and the
  first sense wins where nothing tells the senses apart.
* **Cache.** Centroids are kept in an ``.npz`` (no pickle) named by the
  model's weights (sha256 of its options and parameters), its number of
  layers and the training data (sha256 of the files' decompressed bytes):
  a second run with the same model and data embeds only the test sets.
  Centroids are float32, on the first run as on a cached one, so both give
  the same answers.

Files are read with bounds (:data:`MAX_XML_BYTES`, :data:`MAX_KEY_BYTES`,
:data:`MAX_INDEX_BYTES`, :data:`MAX_LINE_CHARS`, decompressed sizes for
gzip), and XML without a DOCTYPE or entity declarations; a malformed file
raises :class:`WSDDataError` naming the file (and line).
"""
import gzip
import hashlib
import json
import math
import os
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union, cast
from xml.parsers import expat

import numpy

PathLike = Union[str, Path]

#: Most bytes an XML data file may hold, decompressed (SemCor: 41 MB).
MAX_XML_BYTES = 1 << 30
#: Most bytes a gold key file may hold, decompressed (SemCor: 8 MB).
MAX_KEY_BYTES = 256 << 20
#: Most bytes of WordNet's ``index.sense`` (WordNet 3.0: 7.3 MB).
MAX_INDEX_BYTES = 64 << 20
#: Longest line of a key file or of ``index.sense`` (WordNet's: 94 characters).
MAX_LINE_CHARS = 10_000
#: Longest token text of the XML, and most tokens a sentence may have.
MAX_TOKEN_CHARS = 1_000
MAX_SENTENCE_TOKENS = 10_000
#: Parts of speech of the framework's instances, and of a sense key's ss_type.
POS_TAGS = ("NOUN", "VERB", "ADJ", "ADV")
SS_TYPE_POS = {"1": "NOUN", "2": "VERB", "3": "ADJ", "4": "ADV", "5": "ADJ"}
#: Version of the centroid cache's layout and of the tokenisation rules above.
CACHE_FORMAT = 1
MEAN = "mean"
_SPLIT = re.compile(r"[\s_]+")
_DATA_SUFFIXES = (".data.xml", ".data.xml.gz")
_KEY_SUFFIXES = (".gold.key.txt", ".gold.key.txt.gz")


class WSDDataError(ValueError):
    """A data, key or sense index file that cannot be read as the format
    says; the message names the file (and line) and what is wrong."""


# ------------------------------------------------------------------ data
@dataclass(frozen=True)
class Instance:
    """A sense-annotated token: its id, lemma and POS (as in the data; the
    lemma in lower case with ``_`` for spaces), where it is (sentence number,
    biLM token span ``[start, end)``) and its gold sense keys."""

    id: str
    lemma: str
    pos: str
    sentence: int
    start: int
    end: int
    keys: Tuple[str, ...] = ()


@dataclass
class WSDSet:
    """One data file and its key file: the biLM tokens of every sentence,
    the instances, and the sha256 of both files' decompressed bytes."""

    name: str
    sentences: List[List[str]]
    instances: List[Instance]
    sha256: str
    files: Tuple[str, ...] = ()


def read_bounded(path: Path, limit: int, what: str) -> bytes:
    """The bytes of ``path``, gunzipped when it starts with gzip's magic
    bytes, refusing more than ``limit`` bytes (decompressed)."""
    with open(path, "rb") as raw:
        gzipped = raw.read(2) == b"\x1f\x8b"
    opener = gzip.open if gzipped else open
    try:
        with opener(path, "rb") as fin:
            data = fin.read(limit + 1)
    except (OSError, EOFError) as err:
        if isinstance(err, FileNotFoundError):
            raise
        raise WSDDataError(f"{path}: not a readable gzip file ({err})") from None
    if len(data) > limit:
        raise WSDDataError(
            f"{path}: more than {limit} bytes{' decompressed' if gzipped else ''}, more than a {what} may hold"
        )
    return data


def split_token(text: str) -> List[str]:
    """The biLM tokens of a ``<wf>`` or ``<instance>`` text: split on ``_``
    and whitespace ("took_place" and "took place" -> took, place)."""
    return [part for part in _SPLIT.split(text) if part]


def _normal_lemma(lemma: str) -> str:
    return "_".join(split_token(lemma.lower())) or lemma.lower()


def _parse_xml(path: Path, data: bytes) -> Tuple[List[List[str]], List[Instance]]:
    sentences: List[List[str]] = []
    instances: List[Instance] = []
    state: Dict[str, Any] = {"tokens": None, "element": None, "attrs": None, "text": []}
    parser = expat.ParserCreate()

    def fail(message: str):
        raise WSDDataError(f"{path}:{parser.CurrentLineNumber}: {message}")

    def refuse_doctype(*_):
        fail("a DOCTYPE or entity declaration: the framework's files have none (refused, so no entity is expanded)")

    def start(name, attrs):
        if name in ("corpus", "text"):
            if state["tokens"] is not None:
                fail(f"<{name}> inside a <sentence>")
        elif name == "sentence":
            if state["tokens"] is not None:
                fail("a <sentence> inside a <sentence>")
            state["tokens"] = []
        elif name in ("wf", "instance"):
            if state["tokens"] is None:
                fail(f"<{name}> outside a <sentence>")
            if state["element"] is not None:
                fail(f"<{name}> inside <{state['element']}>")
            if name == "instance":
                missing = [a for a in ("id", "lemma", "pos") if not attrs.get(a, "").strip()]
                if missing:
                    fail(f"an <instance> without {', '.join(missing)}: each needs id, lemma and pos")
                if attrs["pos"] not in POS_TAGS:
                    fail(f"instance {attrs['id']}: pos {attrs['pos']!r} is not one of {', '.join(POS_TAGS)}")
            state["element"], state["attrs"], state["text"] = name, attrs, []
        else:
            fail(f"unexpected element <{name}>: the format has corpus, text, sentence, wf and instance")

    def chars(text):
        if state["element"] is not None:
            state["text"].append(text)

    def end(name):
        if name == "sentence":
            if len(state["tokens"]) > MAX_SENTENCE_TOKENS:
                fail(f"a sentence of more than {MAX_SENTENCE_TOKENS} tokens")
            sentences.append(state["tokens"])
            state["tokens"] = None
        elif name in ("wf", "instance"):
            text = "".join(state["text"])
            if len(text) > MAX_TOKEN_CHARS:
                fail(f"a <{name}> of {len(text)} characters (at most {MAX_TOKEN_CHARS})")
            parts = split_token(text)
            if not parts:
                fail(f"an empty <{name}>: every token needs its text")
            tokens = state["tokens"]
            if name == "instance":
                attrs = state["attrs"]
                instances.append(
                    Instance(
                        attrs["id"].strip(),
                        _normal_lemma(attrs["lemma"]),
                        attrs["pos"],
                        len(sentences),
                        len(tokens),
                        len(tokens) + len(parts),
                    )
                )
            tokens.extend(parts)
            state["element"] = None

    parser.StartDoctypeDeclHandler = refuse_doctype
    parser.EntityDeclHandler = refuse_doctype
    parser.StartElementHandler = start
    parser.EndElementHandler = end
    parser.CharacterDataHandler = chars
    try:
        parser.Parse(data, True)
    except expat.ExpatError as err:
        raise WSDDataError(
            f"{path}:{err.lineno}: not well-formed XML ({expat.errors.messages[err.code]}, column {err.offset})"
        ) from None
    if not instances:
        raise WSDDataError(f"{path}: no <instance> in the file: is it a *.data.xml of the framework's format?")
    return sentences, instances


def _key_lines(path: Path, data: bytes) -> Iterator[Tuple[int, List[str]]]:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise WSDDataError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from None
    for number, line in enumerate(text.splitlines(), 1):
        if len(line) > MAX_LINE_CHARS:
            raise WSDDataError(f"{path}:{number}: a line of more than {MAX_LINE_CHARS} characters")
        fields = line.split()
        if fields:
            yield number, fields


def key_pos(key: str) -> Optional[Tuple[str, str]]:
    """``(lemma, POS)`` of a WordNet sense key (``art%1:06:00::`` ->
    ``("art", "NOUN")``), or None if it is not shaped like one."""
    lemma, percent, rest = key.partition("%")
    if not percent or not lemma or len(rest) < 2 or rest[1] != ":" or rest[0] not in SS_TYPE_POS:
        return None
    return lemma.lower(), SS_TYPE_POS[rest[0]]


def _read_keys(path: Path, instances: List[Instance], data_path: Path) -> Tuple[List[Instance], bytes]:
    data = read_bounded(path, MAX_KEY_BYTES, "gold key file")
    by_id = {inst.id: i for i, inst in enumerate(instances)}
    if len(by_id) != len(instances):
        twice = next(i for i, n in Counter(inst.id for inst in instances).items() if n > 1)
        raise WSDDataError(f"{data_path}: the instance id {twice!r} is used twice")
    keys: Dict[str, Tuple[str, ...]] = {}
    for number, fields in _key_lines(path, data):
        if len(fields) < 2:
            raise WSDDataError(
                f"{path}:{number}: a line reads 'INSTANCE_ID SENSE_KEY [SENSE_KEY ...]', found {' '.join(fields)!r}"
            )
        ident, senses = fields[0], tuple(fields[1:])
        if ident not in by_id:
            raise WSDDataError(
                f"{path}:{number}: instance {ident!r} is not in {data_path}: is this the key file of that data?"
            )
        if ident in keys:
            raise WSDDataError(f"{path}:{number}: instance {ident!r} has a second line")
        bad = [k for k in senses if key_pos(k) is None]
        if bad:
            raise WSDDataError(
                f"{path}:{number}: {bad[0]!r} is not a WordNet sense key (lemma%ss_type:lex_filenum:lex_id:...)"
            )
        keys[ident] = senses
    missing = [inst.id for inst in instances if inst.id not in keys]
    if missing:
        raise WSDDataError(
            f"{path}: no sense for {len(missing)} of the {len(instances)} instances of {data_path} (e.g. "
            f"{missing[0]}): "
            "is this the key file of that data?"
        )
    return [Instance(i.id, i.lemma, i.pos, i.sentence, i.start, i.end, keys[i.id]) for i in instances], data


def set_name(path: PathLike) -> str:
    """``semeval2007`` for ``.../semeval2007.data.xml`` (or ``.data.xml.gz``)."""
    name = Path(path).name
    for suffix in _DATA_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def keys_beside(data: PathLike) -> Path:
    """The gold key file of a data file: ``X.gold.key.txt`` (or ``.gz``)
    beside ``X.data.xml`` (or ``.gz``)."""
    data = Path(data)
    stem = set_name(data)
    candidates = [data.with_name(stem + suffix) for suffix in _KEY_SUFFIXES]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise WSDDataError(f"{data}: no gold key file beside it (looked for {candidates[0].name} and {candidates[1].name})")


def read_set(data: PathLike, keys: Optional[PathLike] = None, name: Optional[str] = None) -> WSDSet:
    """A data file (``*.data.xml``, gzipped or not) and its gold key file
    (default: :func:`keys_beside`), checked against each other."""
    data = Path(data)
    keys = Path(keys) if keys is not None else keys_beside(data)
    raw = read_bounded(data, MAX_XML_BYTES, "data file")
    sentences, instances = _parse_xml(data, raw)
    instances, raw_keys = _read_keys(keys, instances, data)
    digest = hashlib.sha256()
    for blob in (raw, raw_keys):
        digest.update(hashlib.sha256(blob).digest())
    return WSDSet(name or set_name(data), sentences, instances, digest.hexdigest(), (data.name, keys.name))


def find_sets(path: PathLike, role: str = "test") -> List[Path]:
    """The data files a path names: a file itself; a directory's
    ``*.data.xml[.gz]`` and its subdirectories' (sorted). The framework's
    root directory is understood: ``Evaluation_Datasets`` for the test sets,
    ``Training_Corpora/SemCor`` for training. For training (``role``
    other than ``"test"``) a directory must name one file: its only data
    file, or the one named ``semcor``."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(2, "No such file or directory", str(path))
    if path.is_file():
        return [path]
    inner = ("Evaluation_Datasets",) if role == "test" else ("Training_Corpora/SemCor", "SemCor")
    for sub in inner:
        if (path / sub).is_dir():
            path = path / sub
            break
    found = sorted(
        p for pattern in ("*", "*/*") for suffix in _DATA_SUFFIXES for p in path.glob(pattern + suffix) if p.is_file()
    )
    if not found:
        raise WSDDataError(f"{path}: no *.data.xml or *.data.xml.gz in the directory or its subdirectories")
    if role != "test" and len(found) > 1:
        semcor = [p for p in found if set_name(p).lower() == "semcor"]
        if len(semcor) != 1:
            raise WSDDataError(
                f"{path}: {len(found)} data files ({', '.join(p.name for p in found)}): name the training files one "
                "by one"
            )
        found = semcor
    return found


# ------------------------------------------------------------- sense index
@dataclass
class SenseIndex:
    """WordNet's ``index.sense``: each sense key's sense number, and each
    lemma+POS's first sense (sense number 1)."""

    numbers: Dict[str, int]
    first: Dict[Tuple[str, str], str]
    sha256: str = ""

    def number(self, key: str) -> int:
        """The key's WordNet sense number (a key not in the index sorts last)."""
        return self.numbers.get(key, 1 << 30)


def read_sense_index(path: PathLike) -> SenseIndex:
    """WordNet 3.0's ``index.sense`` (lines ``sense_key offset sense_number
    tag_count``), e.g. from Debian's ``wordnet-sense-index`` package."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            2,
            "no such file: WordNet's index.sense is needed (Debian's wordnet-sense-index package, "
            "usr/share/wordnet/index.sense; the project fetches it: `python -m weasel run fetch-sense-index` in "
            "project/)",
            str(path),
        )
    data = read_bounded(path, MAX_INDEX_BYTES, "sense index")
    numbers: Dict[str, int] = {}
    first: Dict[Tuple[str, str], str] = {}
    for number, fields in _key_lines(path, data):
        where = f"{path}:{number}"
        if len(fields) != 4 or not (fields[1].isdigit() and fields[2].isdigit() and fields[3].isdigit()):
            raise WSDDataError(
                f"{where}: a line of index.sense reads 'sense_key offset sense_number tag_count', found "
                f"{' '.join(fields)[:200]!r}"
            )
        key, sense = fields[0], int(fields[2])
        lemma_pos = key_pos(key)
        if lemma_pos is None or sense < 1:
            raise WSDDataError(f"{where}: {key!r} with sense number {sense} is not a WordNet sense key and number")
        numbers[key] = sense
        if sense == 1:
            first.setdefault(lemma_pos, key)
    if not first:
        raise WSDDataError(f"{path}: no sense with sense number 1: is this WordNet's index.sense?")
    return SenseIndex(numbers, first, hashlib.sha256(data).hexdigest())


# -------------------------------------------------------------- centroids
@dataclass
class Centroids:
    """Sense centroids per layer: ``vectors[i]`` is sense ``keys[i]``'s
    (L+1, dim) mean over its ``counts[i]`` training instances (float32)."""

    keys: List[str]
    counts: numpy.ndarray
    vectors: numpy.ndarray
    meta: Dict = field(default_factory=dict)

    @property
    def num_layers(self) -> int:
        return int(self.vectors.shape[1])


def model_digest(bilm) -> str:
    """sha256 of what decides a biLM's outputs: its options and every
    parameter and buffer (names, dtypes, shapes, bytes), and an
    ELMoForManyLangs model's vocabulary."""
    digest = hashlib.sha256()
    digest.update(json.dumps(bilm.options.to_dict(), sort_keys=True).encode())
    for name, tensor in sorted(bilm.state_dict().items()):
        array = tensor.detach().cpu().contiguous().numpy()
        digest.update(f"{name}|{array.dtype}|{array.shape}".encode())
        digest.update(array.tobytes())
    vocabulary = getattr(bilm, "vocabulary", None)
    if vocabulary is not None:
        digest.update(
            json.dumps(
                [sorted(vocabulary.chars.items()), sorted((vocabulary.words or {}).items()), vocabulary.max_chars]
            ).encode()
        )
    return digest.hexdigest()


def data_digest(sets: Sequence[WSDSet]) -> str:
    """sha256 of the training sets' digests, in order."""
    digest = hashlib.sha256()
    for s in sets:
        digest.update(s.sha256.encode())
    return digest.hexdigest()


def _embedded(
    bilm, sentences: Sequence[Sequence[str]], batch_size: int, progress: bool, desc: str
) -> Iterator[Tuple[int, numpy.ndarray]]:
    """``(sentence number, (L+1, n, dim) array)`` for every sentence, by
    the biLM's ``iter_embeddings`` (length-sorted batches, one held at a
    time) or, for a stand-in without it, ``embed_sentences`` in chunks."""
    from tqdm import tqdm

    with tqdm(total=len(sentences), desc=desc, unit=" sentences", disable=not progress) as bar:
        if hasattr(bilm, "iter_embeddings"):
            for index, layers in bilm.iter_embeddings(sentences, batch_size):
                yield index, layers
                bar.update(1)
            return
        chunk = max(batch_size, 1024)
        for begin in range(0, len(sentences), chunk):
            for offset, layers in enumerate(
                bilm.embed_sentences(sentences[begin : begin + chunk], batch_size=batch_size)
            ):
                yield begin + offset, layers
                bar.update(1)


def compute_centroids(bilm, train: Sequence[WSDSet], batch_size: int = 64, progress: bool = False) -> Centroids:
    """Embed the training sets and average each sense key's instance vectors
    per layer (float64 sums, float32 centroids)."""
    keys = sorted({k for s in train for inst in s.instances for k in inst.keys})
    row = {k: i for i, k in enumerate(keys)}
    sums: Optional[numpy.ndarray] = None
    counts = numpy.zeros(len(keys), dtype=numpy.int64)
    for s in train:
        by_sentence: Dict[int, List[Instance]] = {}
        for inst in s.instances:
            by_sentence.setdefault(inst.sentence, []).append(inst)
        wanted = sorted(by_sentence)
        for position, layers in _embedded(
            bilm, [s.sentences[i] for i in wanted], batch_size, progress, f"embedding {s.name}"
        ):
            if sums is None:
                sums = numpy.zeros((len(keys), layers.shape[0], layers.shape[2]), dtype=numpy.float64)
            for inst in by_sentence[wanted[position]]:
                vector = layers[:, inst.start:inst.end].mean(axis=1)
                for k in inst.keys:
                    sums[row[k]] += vector
                    counts[row[k]] += 1
    if sums is None:
        raise ValueError("the training sets hold no sense-tagged instance: nothing to make centroids of")
    vectors = (sums / counts[:, None, None]).astype(numpy.float32)
    return Centroids(keys, counts, vectors)


def cache_path(cache_dir: PathLike, weights: str, layers: int, data: str) -> Path:
    return Path(cache_dir) / f"centroids-{weights[:16]}-L{layers}-{data[:16]}.npz"


def _meta(weights: str, layers: int, data: str) -> Dict:
    return {"format": CACHE_FORMAT, "weights_sha256": weights, "layers": layers, "data_sha256": data,
            "multiword": "mean of the parts split on _ and whitespace"}


def load_cached(path: Path, meta: Dict) -> Optional[Centroids]:
    """The centroids in ``path`` if it holds those of ``meta``; None if it
    is missing, unreadable or of other weights, layers or data."""
    if not path.is_file():
        return None
    try:
        with numpy.load(path, allow_pickle=False) as npz:
            stored = json.loads(str(npz["meta"]))
            keys, counts, vectors = [str(k) for k in npz["keys"]], npz["counts"], npz["vectors"]
    except (OSError, ValueError, KeyError):
        return None
    if (
        stored != meta
        or vectors.ndim != 3
        or vectors.shape[0] != len(keys)
        or counts.shape != (len(keys),)
        or vectors.shape[1] != meta["layers"]
    ):
        return None
    return Centroids(keys, counts.astype(numpy.int64), vectors.astype(numpy.float32), stored)


def save_cached(path: Path, centroids: Centroids) -> None:
    """Write atomically (a temporary file, then a rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as fout:
        numpy.savez(
            fout,
            meta=numpy.array(json.dumps(centroids.meta, sort_keys=True)),
            keys=numpy.array(centroids.keys),
            counts=centroids.counts,
            vectors=centroids.vectors,
        )
    os.replace(tmp, path)


def centroids_for(bilm, train: Sequence[WSDSet], cache_dir: Optional[PathLike] = None, batch_size: int = 64,
                  progress: bool = False) -> Tuple[Centroids, bool]:
    """The training sets' centroids for ``bilm``: from the cache in
    ``cache_dir`` when it holds them, else computed (and stored there).
    Returns them and whether they came from the cache."""
    if cache_dir is None:
        return compute_centroids(bilm, train, batch_size, progress), False
    weights = model_digest(bilm)
    meta = _meta(weights, bilm.num_layers, data_digest(train))
    path = cache_path(cache_dir, weights, bilm.num_layers, meta["data_sha256"])
    cached = load_cached(path, meta)
    if cached is not None:
        return cached, True
    centroids = compute_centroids(bilm, train, batch_size, progress)
    centroids.meta = meta
    save_cached(path, centroids)
    return centroids, False


# ------------------------------------------------------------- prediction
def layer_names(num_layers: int) -> List[Union[int, str]]:
    """``[0, 1, ..., L, "mean"]``."""
    return list(range(num_layers)) + [MEAN]


def _with_mean(vectors: numpy.ndarray) -> numpy.ndarray:
    """(..., L+1, dim) -> (..., L+2, dim): the layers, then their mean."""
    return numpy.concatenate([vectors, vectors.mean(axis=-2, keepdims=True)], axis=-2)


def _unit(vectors: numpy.ndarray) -> numpy.ndarray:
    vectors = numpy.asarray(vectors, dtype=numpy.float64)
    norms = numpy.linalg.norm(vectors, axis=-1, keepdims=True)
    return vectors / numpy.where(norms > 0, norms, 1.0)


def senses_by_lemma(keys: Sequence[str], index: SenseIndex) -> Dict[Tuple[str, str], List[int]]:
    """Lemma+POS -> positions in ``keys`` of its senses, by WordNet sense
    number, then key."""
    groups: Dict[Tuple[str, str], List[int]] = {}
    for i, key in enumerate(keys):
        groups.setdefault(cast(Tuple[str, str], key_pos(key)), []).append(i)
    for members in groups.values():
        members.sort(key=lambda i: (index.number(keys[i]), keys[i]))
    return groups


def instance_vectors(bilm, test: WSDSet, batch_size: int = 64, progress: bool = False) -> numpy.ndarray:
    """(n_instances, L+1, dim) float32: each instance's mean over its parts."""
    out: Optional[numpy.ndarray] = None
    by_sentence: Dict[int, List[int]] = {}
    for i, inst in enumerate(test.instances):
        by_sentence.setdefault(inst.sentence, []).append(i)
    wanted = sorted(by_sentence)
    for position, layers in _embedded(
        bilm, [test.sentences[i] for i in wanted], batch_size, progress, f"embedding {test.name}"
    ):
        if out is None:
            out = numpy.zeros((len(test.instances), layers.shape[0], layers.shape[2]), dtype=numpy.float32)
        for i in by_sentence[wanted[position]]:
            inst = test.instances[i]
            out[i] = layers[:, inst.start:inst.end].mean(axis=1)
    return cast(numpy.ndarray, out)  # None only for a set without instances


def predict_nearest(
    centroids: Centroids, index: SenseIndex, test: WSDSet, vectors: numpy.ndarray
) -> Dict[Union[int, str], List[Optional[str]]]:
    """Per layer (0..L, ``"mean"``), each instance's answer: the sense of
    its lemma+POS whose centroid is nearest by cosine; WordNet's first
    sense for a lemma+POS unseen in training; None when neither exists."""
    groups = senses_by_lemma(centroids.keys, index)
    unit_centroids = _unit(_with_mean(centroids.vectors))
    unit_vectors = _unit(_with_mean(vectors))
    names = layer_names(centroids.num_layers)
    answers: Dict[Union[int, str], List[Optional[str]]] = {name: [] for name in names}
    for i, inst in enumerate(test.instances):
        members = groups.get((inst.lemma, inst.pos))
        for slot, name in enumerate(names):
            if not members:
                answers[name].append(index.first.get((inst.lemma, inst.pos)))
                continue
            scores = unit_centroids[members, slot] @ unit_vectors[i, slot]
            answers[name].append(centroids.keys[members[int(numpy.argmax(scores))]])  # argmax: first of ties
    return answers


def first_sense(index: SenseIndex, test: WSDSet) -> List[Optional[str]]:
    """WordNet's first sense of each instance's lemma+POS (None if WordNet has none)."""
    return [index.first.get((inst.lemma, inst.pos)) for inst in test.instances]


def most_frequent(centroids: Centroids, index: SenseIndex, test: WSDSet) -> List[Optional[str]]:
    """The training data's most frequent sense of each instance's lemma+POS
    (ties: lower sense number), WordNet's first sense where unseen."""
    groups = senses_by_lemma(centroids.keys, index)
    answers: List[Optional[str]] = []
    for inst in test.instances:
        members = groups.get((inst.lemma, inst.pos))
        if members:
            best = max(members, key=lambda i: (centroids.counts[i], -members.index(i)))
            answers.append(centroids.keys[best])
        else:
            answers.append(index.first.get((inst.lemma, inst.pos)))
    return answers


def score(instances: Sequence[Instance], answers: Sequence[Optional[str]]) -> Dict[str, float]:
    """The framework's scoring: right when the answer is one of the gold
    keys; P over the answered, R over all, F1 their harmonic mean (in %)."""
    answered = sum(a is not None for a in answers)
    correct = sum(a is not None and a in inst.keys for inst, a in zip(instances, answers))
    precision = 100.0 * correct / answered if answered else 0.0
    recall = 100.0 * correct / len(instances) if instances else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {
        "f1": f1,
        "precision": precision,
        "recall": recall,
        "correct": correct,
        "answered": answered,
        "instances": len(instances),
    }


# ------------------------------------------------------------ evaluation
def evaluate(bilm, centroids: Centroids, index: SenseIndex, tests: Sequence[WSDSet], batch_size: int = 64,
             progress: bool = False, pool: Optional[str] = None) -> Dict:
    """F1 of the nearest-centroid rule per layer on each test set, and of
    the two baselines. Returns ``{"layers": {layer: {set: score}},
    "first_sense": {set: score}, "most_frequent": {set: score},
    "fallback": {set: instances answered by WordNet's first sense, their
    lemma+POS unseen in training}}``
    (scores as :func:`score`, layer ``"mean"`` the mean of the layers).
    ``pool``: also score the sets' instances together under that name (the
    framework's ALL is the concatenation of its five sets)."""
    groups = senses_by_lemma(centroids.keys, index)
    answers: Dict[str, Dict] = {}
    for test in tests:
        vectors = instance_vectors(bilm, test, batch_size, progress)
        answers[test.name] = dict(predict_nearest(centroids, index, test, vectors))
        answers[test.name]["first_sense"] = first_sense(index, test)
        answers[test.name]["most_frequent"] = most_frequent(centroids, index, test)
    instances = {test.name: test.instances for test in tests}
    if pool is not None:
        instances[pool] = [inst for test in tests for inst in test.instances]
        answers[pool] = {row: [a for test in tests for a in answers[test.name][row]] for row in answers[tests[0].name]}
    result: Dict = {"layers": {name: {} for name in layer_names(centroids.num_layers)}, "first_sense": {},
                    "most_frequent": {}, "fallback": {}}
    for name, rows in answers.items():
        for row, given in rows.items():
            scores = score(instances[name], given)
            if row in ("first_sense", "most_frequent"):
                result[row][name] = scores
            else:
                result["layers"][row][name] = scores
        result["fallback"][name] = sum((inst.lemma, inst.pos) not in groups and (inst.lemma, inst.pos) in index.first
                                       for inst in instances[name])
    return result


def pool_name(tests: Sequence[WSDSet]) -> Optional[str]:
    """``"ALL"`` when several test sets are given and none is the
    framework's ALL already; else None."""
    if len(tests) > 1 and not any(t.name.lower() == "all" for t in tests):
        return "ALL"
    return None


def random_twin(bilm, seed: int = 0):
    """A biLM of ``bilm``'s shape (options, and an ELMoForManyLangs model's
    vocabulary) with random weights: the package's own initialisation under
    ``torch.manual_seed(seed)``, in eval mode (for bilm-tf models, the same
    weights as :func:`spacy_elmo.senses.random_like`)."""
    import torch

    from ..bilm import BiLM

    torch.manual_seed(seed)
    return BiLM(bilm.options, vocabulary=getattr(bilm, "vocabulary", None)).eval()


@dataclass
class WSDReport:
    """What :func:`run` measured: the model's rows, the baselines, the
    random-weights rows per seed, and the timings (seconds)."""

    sets: List[str]
    model: Dict
    random: Dict[int, Dict] = field(default_factory=dict)
    seconds: Dict[str, float] = field(default_factory=dict)
    cached: Dict[str, bool] = field(default_factory=dict)
    train: List[WSDSet] = field(default_factory=list)
    tests: List[WSDSet] = field(default_factory=list)
    centroids: Optional[Centroids] = None


def run(bilm, train: Sequence[WSDSet], tests: Sequence[WSDSet], index: SenseIndex, random_seeds: Sequence[int] = (),
        cache_dir: Optional[PathLike] = None, batch_size: int = 64, progress: bool = False) -> WSDReport:
    """The whole protocol for ``bilm`` and for random weights of its shape
    (one per seed): centroids (cached), then every test set."""
    pool = pool_name(tests)
    report = WSDReport([t.name for t in tests] + ([pool] if pool else []), {}, train=list(train), tests=list(tests))
    started = time.perf_counter()
    centroids, report.cached["centroids"] = centroids_for(bilm, train, cache_dir, batch_size, progress)
    report.seconds["centroids"] = time.perf_counter() - started
    report.centroids = centroids
    started = time.perf_counter()
    report.model = evaluate(bilm, centroids, index, tests, batch_size, progress, pool)
    report.seconds["tests"] = time.perf_counter() - started
    for seed in random_seeds:
        twin = random_twin(bilm, seed)
        started = time.perf_counter()
        twin_centroids, report.cached[f"random seed {seed}"] = centroids_for(
            twin, train, cache_dir, batch_size, progress
        )
        report.random[seed] = evaluate(twin, twin_centroids, index, tests, batch_size, progress, pool)["layers"]
        report.seconds[f"random seed {seed}"] = time.perf_counter() - started
    return report


# ---------------------------------------------------------------- output
def _mean_sd(values: Sequence[float]) -> Tuple[float, float]:
    mean = sum(values) / len(values)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1)) if len(values) > 1 else 0.0
    return mean, sd


def _layer_label(name) -> str:
    return "mean of the layers" if name == MEAN else f"layer {name}"


def table_rows(report: WSDReport, train_name: str = "SemCor") -> List[Tuple[str, Dict[str, str]]]:
    """(row label, {set: F1 text}) in the table's order."""
    names = report.sets
    rows = [(f"biLM {_layer_label(layer)}", {n: f"{scores[n]['f1']:.1f}" for n in names})
            for layer, scores in report.model["layers"].items()]
    rows.append(("WordNet first sense", {n: f"{report.model['first_sense'][n]['f1']:.1f}" for n in names}))
    rows.append(
        (f"{train_name} most frequent sense", {n: f"{report.model['most_frequent'][n]['f1']:.1f}" for n in names})
    )
    if report.random:
        seeds = sorted(report.random)
        for layer in report.model["layers"]:
            cells = {}
            for n in names:
                mean, sd = _mean_sd([report.random[s][layer][n]["f1"] for s in seeds])
                cells[n] = f"{mean:.1f} ± {sd:.1f}" if len(seeds) > 1 else f"{mean:.1f}"
            rows.append(
                (f"random weights, {_layer_label(layer)} ({len(seeds)} seed{'s' if len(seeds) > 1 else ''})", cells)
            )
    return rows


def format_table(report: WSDReport, train_name: str = "SemCor") -> str:
    """The F1 table (rows x test sets) and a line per set on its instances."""
    names = report.sets
    rows = table_rows(report, train_name)
    first = max(len(label) for label, _ in rows + [("F1 (%)", {})])
    widths = {n: max(len(n), *(len(cells[n]) for _, cells in rows)) for n in names}
    lines = ["F1 (%)".ljust(first) + "".join("  " + n.rjust(widths[n]) for n in names)]
    for label, cells in rows:
        lines.append(label.ljust(first) + "".join("  " + cells[n].rjust(widths[n]) for n in names))
    for name in report.sets:
        count = report.model["first_sense"][name]["instances"]
        missing = count - report.model["layers"][0][name]["answered"]
        note = f"; {missing} without an answer (lemma+POS in neither), so P != R" if missing else ""
        lines.append(f"{name}: {count} instances, {report.model['fallback'][name]} of them with a lemma+POS unseen "
                     f"in training (answered by WordNet's first sense){note}")
    return "\n".join(lines)


def report_json(report: WSDReport) -> Dict:
    """The report as JSON-ready data (no paths: file names and sha256s)."""
    seeds = sorted(report.random)
    out: Dict = {
        "protocol": "Peters et al. 2018, section 5.3: sense centroids per layer from training, 1-NN by cosine among "
        "the lemma+POS's senses seen in training, WordNet's first sense where unseen",
        "train": [
            {
                "name": s.name,
                "files": list(s.files),
                "sha256": s.sha256,
                "instances": len(s.instances),
                "sentences": len(s.sentences),
            }
            for s in report.train
        ],
        "senses_seen": len(report.centroids.keys) if report.centroids is not None else None,
        "tests": [
            {"name": t.name, "files": list(t.files), "sha256": t.sha256, "instances": len(t.instances)}
            for t in report.tests
        ],
        "fallback": report.model["fallback"],
        "layers": {str(layer): scores for layer, scores in report.model["layers"].items()},
        "first_sense": report.model["first_sense"],
        "most_frequent": report.model["most_frequent"],
        "random": {
            "seeds": seeds,
            "per_seed": {
                str(s): {
                    str(layer): {n: v["f1"] for n, v in scores.items()} for layer, scores in report.random[s].items()
                }
                for s in seeds
            },
        },
        "seconds": {k: round(v, 1) for k, v in report.seconds.items()},
        "cached": report.cached,
    }
    if seeds:
        summary: Dict[str, Any] = {}
        for layer in report.model["layers"]:
            summary[str(layer)] = {}
            for name in report.sets:
                mean, sd = _mean_sd([report.random[s][layer][name]["f1"] for s in seeds])
                summary[str(layer)][name] = {"mean": mean, "sd": sd}
        out["random"]["f1"] = summary
    return out
