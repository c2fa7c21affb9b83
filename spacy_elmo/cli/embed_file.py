"""The hdf5 file ``embed -o`` writes, and reading it back.

Layout (``FORMAT``):

* dataset ``"i"`` for sentence ``i`` (line ``i`` of the input, 0-based):
  float32, shape (L+1, n_tokens_i, dim), the biLM's layers with the
  sentence boundaries removed: the layout of bilm-tf's
  ``dump_bilm_embeddings``, so readers of that format read these files;
* dataset ``tokens``: every token of the input in order (UTF-8 strings), and
  dataset ``sentence``: each token's sentence index (int64). The ``k``-th
  token of sentence ``i`` is row ``k`` of dataset ``"i"``;
* attributes of the file: ``format``, ``model`` (``--model`` as given;
  ``english`` for the default), ``weights_sha256``, ``options_sha256``,
  ``options`` (the options JSON), ``tokenization``, ``input`` (the input
  file as given, or ``<stdin>``), ``sentences``, ``layers``, ``dim`` and
  ``spacy_elmo_version``.

The file is written as ``NAME.partial`` and renamed when complete, so an
interrupted run never leaves a file that looks finished.
"""
import os
from pathlib import Path
from typing import Any, Dict, List, Sequence, Tuple, Union

import numpy

FORMAT = "spacy_elmo.embed/1"


class EmbedWriter:
    """Write sentences' arrays as they are computed (any order)."""

    def __init__(self, path: Path, tokens: Sequence[Sequence[str]], attrs: Dict[str, Any]) -> None:
        import h5py

        self.path = Path(path)
        self.partial = self.path.with_name(self.path.name + ".partial")
        self.file = h5py.File(self.partial, "w")
        flat = [t for sentence in tokens for t in sentence]
        index = numpy.repeat(numpy.arange(len(tokens), dtype=numpy.int64), [len(s) for s in tokens])
        self.file.create_dataset("tokens", data=numpy.array(flat, dtype=object), dtype=h5py.string_dtype())
        self.file.create_dataset("sentence", data=index)
        self.file.attrs["format"] = FORMAT
        self.file.attrs["sentences"] = len(tokens)
        for key, value in attrs.items():
            self.file.attrs[key] = value
        self.lengths = [len(s) for s in tokens]

    def write(self, index: int, array: numpy.ndarray) -> None:
        if array.shape[1] != self.lengths[index]:
            raise ValueError(f"sentence {index}: {array.shape[1]} vectors for {self.lengths[index]} tokens")
        self.file.create_dataset(str(index), data=array)
        self.file.attrs["layers"], self.file.attrs["dim"] = array.shape[0], array.shape[2]

    def close(self) -> None:
        self.file.close()
        os.replace(self.partial, self.path)

    def abort(self) -> None:
        self.file.close()
        self.partial.unlink(missing_ok=True)


def read_embeddings(path: Union[str, Path]) -> Tuple[List[Tuple[List[str], numpy.ndarray]], Dict[str, Any]]:
    """A file written by ``embed -o``: ``[(tokens, array), ...]`` one per
    sentence, and the file's attributes."""
    import h5py

    with h5py.File(path, "r") as fin:
        attrs = dict(fin.attrs)
        if attrs.get("format") != FORMAT:
            raise ValueError(f"{path} is not a file written by `spacy_elmo embed -o` (format {attrs.get('format')!r})")
        tokens = fin["tokens"].asstr()[:].tolist()
        index = fin["sentence"][:]
        n = int(attrs["sentences"])
        bounds = numpy.searchsorted(index, numpy.arange(n + 1))
        sentences = [(tokens[bounds[i] : bounds[i + 1]], fin[str(i)][:]) for i in range(n)]
    return sentences, attrs
