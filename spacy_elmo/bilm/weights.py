"""Read and write the published biLM weight file (bilm-tf / AllenNLP hdf5).

Datasets, with ``F`` = number of CNN filters in all, ``P`` = projection_dim,
``C`` = lstm dim::

    char_embed                                (261, char_dim)   no zero row
    CNN/W_cnn_{i}, CNN/b_cnn_{i}              (1, width, char_dim, num), (num,)
    CNN_high_{k}/W_transform, b_transform     (F, F), (F,)
    CNN_high_{k}/W_carry, b_carry             (F, F), (F,)
    CNN_proj/W_proj, b_proj                   (F, P), (P,)   absent when F == P
    RNN_{d}/RNN/MultiRNNCell/Cell{l}/LSTMCell/W_0   (P + P, 4C)  [input; recurrent]
                                             /B     (4C,)  gates (i, j, f, o)
                                             /W_P_0 (C, P)
    d = 0 forward, d = 1 backward

Weights are right-multiplied (``x W``) as in TensorFlow; the forget gate's
+1.0 is added at run time and never stored.
"""
from pathlib import Path
from typing import BinaryIO, Dict, Iterator, Tuple, Union

import numpy
import torch

from .lstm import BiProjectedLSTMLayer
from .options import BiLMOptions

PathLike = Union[str, Path]


class WeightFileError(ValueError):
    """The weight file is unreadable, incomplete, or does not match the options."""


def _lstm_prefix(direction: int, layer: int) -> str:
    return f"RNN_{direction}/RNN/MultiRNNCell/Cell{layer}/LSTMCell"


# TF packs gates as (i, j, f, o); PyTorch as (i, f, g=j, o).
def _tf_to_torch_gates(cell_dim: int) -> numpy.ndarray:
    i, j, f, o = (numpy.arange(k * cell_dim, (k + 1) * cell_dim) for k in range(4))
    return numpy.concatenate([i, f, j, o])


def _torch_to_tf_gates(cell_dim: int) -> numpy.ndarray:
    return numpy.argsort(_tf_to_torch_gates(cell_dim))


def _options(model_or_options) -> BiLMOptions:
    return model_or_options if isinstance(model_or_options, BiLMOptions) else model_or_options.options


def _layout(model) -> Iterator[Tuple[str, Tuple[int, ...]]]:
    """Every dataset of the published format with its expected shape
    (``model``: a biLM or its options)."""
    o = _options(model)
    yield "char_embed", (261, o.char_embedding_dim)
    for i, (width, num) in enumerate(o.filters):
        yield f"CNN/W_cnn_{i}", (1, width, o.char_embedding_dim, num)
        yield f"CNN/b_cnn_{i}", (num,)
    F = o.n_filters
    for k in range(o.n_highway):
        for kind in ("transform", "carry"):
            yield f"CNN_high_{k}/W_{kind}", (F, F)
            yield f"CNN_high_{k}/b_{kind}", (F,)
    if o.has_projection:
        yield "CNN_proj/W_proj", (F, o.projection_dim)
        yield "CNN_proj/b_proj", (o.projection_dim,)
    for d in range(2):
        for layer in range(o.n_layers):
            prefix = _lstm_prefix(d, layer)
            yield f"{prefix}/W_0", (2 * o.projection_dim, 4 * o.lstm_dim)
            yield f"{prefix}/B", (4 * o.lstm_dim,)
            yield f"{prefix}/W_P_0", (o.lstm_dim, o.projection_dim)


def _open(path: Union[PathLike, BinaryIO], mode: str):
    """Open a path or a binary file object (e.g. ``io.BytesIO``) as hdf5."""
    import h5py

    if hasattr(path, "read"):
        try:
            return h5py.File(path, mode)
        except OSError as err:
            raise WeightFileError(f"cannot open the given file object as hdf5: {err}") from None
    path = Path(path)
    if mode == "r":
        if not path.exists():
            raise WeightFileError(f"weight file not found: {path}")
        if path.is_dir():
            raise WeightFileError(f"weight path {path} is a directory; give the weights hdf5 file inside it")
        if not path.is_file():
            raise WeightFileError(f"weight path {path} is not a regular file (a device, FIFO or socket)")
        if not h5py.is_hdf5(str(path)):
            raise WeightFileError(f"{path} is not an hdf5 file")
    try:
        return h5py.File(str(path), mode)
    except OSError as err:
        raise WeightFileError(f"cannot open {path} as hdf5: {err}") from None


def _check_counts(fin, model) -> None:
    """Catch options that describe fewer layers/filters than the file holds."""
    o = _options(model)
    extra = []
    if f"CNN/W_cnn_{len(o.filters)}" in fin:
        extra.append(f"CNN/W_cnn_{len(o.filters)} (options list {len(o.filters)} filters)")
    if f"CNN_high_{o.n_highway}" in fin:
        extra.append(f"CNN_high_{o.n_highway} (options say n_highway={o.n_highway})")
    if _lstm_prefix(0, o.n_layers) in fin:
        extra.append(f"{_lstm_prefix(0, o.n_layers)} (options say n_layers={o.n_layers})")
    if not o.has_projection and "CNN_proj" in fin:
        extra.append("CNN_proj (options make the CNN width equal projection_dim, so no projection)")
    if extra:
        raise WeightFileError("weight file holds more than the options describe: " + "; ".join(extra))


def read_datasets(source: Union[PathLike, BinaryIO], model) -> Dict[str, numpy.ndarray]:
    """Read and shape-check every dataset ``model``'s options call for
    (``model``: a biLM or just its options, so that a file can be checked
    before the model is allocated)."""
    path = "(in memory)" if hasattr(source, "read") else source  # for messages
    arrays = {}
    with _open(source, "r") as fin:
        _check_counts(fin, model)
        for name, shape in _layout(model):
            if name not in fin:
                raise WeightFileError(f"weight file {path}: missing dataset '{name}' (expected shape {shape})")
            data = fin[name]
            if not hasattr(data, "shape"):
                raise WeightFileError(f"weight file {path}: '{name}' is a group, expected a dataset of shape {shape}")
            if tuple(data.shape) != shape:
                raise WeightFileError(
                    f"weight file {path}: dataset '{name}' has shape {tuple(data.shape)}, "
                    f"expected {shape} from the options"
                )
            if data.dtype.kind not in "fiu":
                raise WeightFileError(
                    f"weight file {path}: dataset '{name}' holds {data.dtype} values, expected numbers "
                    "(float32); the file is damaged or not a biLM weight file"
                )
            try:
                array = numpy.asarray(data[...], dtype=numpy.float32)
            except (ValueError, TypeError, OSError) as err:
                raise WeightFileError(
                    f"weight file {path}: dataset '{name}' cannot be read as float32: {err}"
                ) from None
            if not numpy.isfinite(array).all():
                raise WeightFileError(f"weight file {path}: dataset '{name}' holds NaN or infinite values")
            arrays[name] = array
    return arrays


def read_checked(weights: Union[PathLike, BinaryIO], options: PathLike) -> Tuple[BiLMOptions, Dict[str, numpy.ndarray]]:
    """The options file, validated, and the weight file's datasets, read and
    checked against them (:func:`read_datasets`): all a model needs, before
    it is allocated."""
    parsed = BiLMOptions.from_file(options)
    return parsed, read_datasets(weights, parsed)


def load_datasets(model, a: Dict[str, numpy.ndarray]) -> None:
    """Copy the datasets ``a`` (as :func:`read_datasets` returns them) into
    ``model`` (a :class:`~spacy_elmo.bilm.BiLM`)."""
    o = model.options
    enc = model.token_encoder
    t = lambda x: torch.from_numpy(numpy.ascontiguousarray(x))  # noqa: E731
    with torch.no_grad():
        enc.char_embedding.weight[0].zero_()
        enc.char_embedding.weight[1:].copy_(t(a["char_embed"]))
        for i, conv in enumerate(enc.convs):
            # (1, width, in, out) -> Conv1d's (out, in, width)
            conv.weight.copy_(t(a[f"CNN/W_cnn_{i}"][0].transpose(2, 1, 0)))
            conv.bias.copy_(t(a[f"CNN/b_cnn_{i}"]))
        for k, highway in enumerate(enc.highways):
            g = f"CNN_high_{k}"
            highway.linear.weight.copy_(t(numpy.concatenate([a[f"{g}/W_transform"].T, a[f"{g}/W_carry"].T])))
            highway.linear.bias.copy_(t(numpy.concatenate([a[f"{g}/b_transform"], a[f"{g}/b_carry"]])))
        if enc.projection is not None:
            enc.projection.weight.copy_(t(a["CNN_proj/W_proj"].T))
            enc.projection.bias.copy_(t(a["CNN_proj/b_proj"]))
        for index, layer in enumerate(model.layers):
            _load_lstm(layer, index, a, o.projection_dim, t)


def _load_lstm(layer: BiProjectedLSTMLayer, index: int, a, input_dim: int, t) -> None:
    gates = _tf_to_torch_gates(layer.cell_dim)
    for d in range(2):
        prefix = _lstm_prefix(d, index)
        w = a[f"{prefix}/W_0"].T[gates]  # (4C, in + proj), torch gate order
        layer.weight_ih[d].copy_(t(w[:, :input_dim]))
        layer.weight_hh[d].copy_(t(w[:, input_dim:]))
        layer.bias[d].copy_(t(a[f"{prefix}/B"][gates]))
        layer.weight_proj[d].copy_(t(a[f"{prefix}/W_P_0"].T))


def model_datasets(model) -> Dict[str, numpy.ndarray]:
    """The model's weights as the published datasets (exact copies)."""
    o = model.options
    enc = model.token_encoder
    n = lambda x: x.detach().float().cpu().numpy()  # noqa: E731
    out = {"char_embed": n(enc.char_embedding.weight[1:])}
    for i, conv in enumerate(enc.convs):
        out[f"CNN/W_cnn_{i}"] = n(conv.weight).transpose(2, 1, 0)[None]
        out[f"CNN/b_cnn_{i}"] = n(conv.bias)
    F = o.n_filters
    for k, highway in enumerate(enc.highways):
        w, b = n(highway.linear.weight), n(highway.linear.bias)
        g = f"CNN_high_{k}"
        out[f"{g}/W_transform"], out[f"{g}/W_carry"] = w[:F].T, w[F:].T
        out[f"{g}/b_transform"], out[f"{g}/b_carry"] = b[:F], b[F:]
    if enc.projection is not None:
        out["CNN_proj/W_proj"] = n(enc.projection.weight).T
        out["CNN_proj/b_proj"] = n(enc.projection.bias)
    for index, layer in enumerate(model.layers):
        gates = _torch_to_tf_gates(layer.cell_dim)
        for d in range(2):
            prefix = _lstm_prefix(d, index)
            w = numpy.concatenate([n(layer.weight_ih[d]), n(layer.weight_hh[d])], axis=1)
            out[f"{prefix}/W_0"] = w[gates].T
            out[f"{prefix}/B"] = n(layer.bias[d])[gates]
            out[f"{prefix}/W_P_0"] = n(layer.weight_proj[d]).T
    return out


def save_hdf5(model, path: Union[PathLike, BinaryIO]) -> None:
    """Write ``model``'s weights in the published layout."""
    expected = dict(_layout(model))
    with _open(path, "w") as fout:
        for name, array in model_datasets(model).items():
            assert array.shape == expected[name], (name, array.shape, expected[name])
            fout.create_dataset(name, data=numpy.ascontiguousarray(array, dtype=numpy.float32))
