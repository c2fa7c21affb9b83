"""Every malformed-input case gives a ValueError naming what is wrong."""
import json
import shutil

import h5py
import numpy
import pytest

from spacy_elmo import BiLM, OptionsError, WeightFileError

LSTM_W = "RNN_0/RNN/MultiRNNCell/Cell1/LSTMCell/W_0"


@pytest.fixture
def copy(tmp_path, parity_paths):
    weights, options = tmp_path / "w.hdf5", tmp_path / "o.json"
    shutil.copy(parity_paths[0], weights)
    shutil.copy(parity_paths[1], options)
    weights.chmod(0o644)
    options.chmod(0o644)
    return weights, options


def edit_options(path, fn):
    data = json.loads(path.read_text())
    fn(data)
    path.write_text(json.dumps(data))


def test_missing_dataset(copy):
    with h5py.File(copy[0], "a") as f:
        del f["CNN/W_cnn_1"]
    with pytest.raises(WeightFileError, match=r"missing dataset 'CNN/W_cnn_1' \(expected shape \(1, 2, 6, 8\)\)"):
        BiLM.from_hdf5(*copy)


def test_shape_that_does_not_match_the_options(copy):
    with h5py.File(copy[0], "a") as f:
        del f[LSTM_W]
        f[LSTM_W] = numpy.zeros((48, 200), dtype="f4")
    with pytest.raises(
        WeightFileError, match=r"'RNN_0/.*/Cell1/LSTMCell/W_0' has shape \(48, 200\), expected \(48, 192\)"
    ):
        BiLM.from_hdf5(*copy)


def test_options_with_other_sizes_than_the_weights(copy):
    edit_options(copy[1], lambda d: d["lstm"].__setitem__("dim", 64))
    with pytest.raises(WeightFileError, match=r"has shape \(48, 192\), expected \(48, 256\)"):
        BiLM.from_hdf5(*copy)


def test_options_with_fewer_layers_than_the_weights(copy):
    edit_options(copy[1], lambda d: d["lstm"].__setitem__("n_layers", 1))
    with pytest.raises(WeightFileError, match=r"Cell1/LSTMCell \(options say n_layers=1\)"):
        BiLM.from_hdf5(*copy)


@pytest.mark.parametrize(
    "block,field,message",
    [
        ("lstm", "projection_dim", "missing field 'lstm.projection_dim'"),
        ("lstm", "dim", "missing field 'lstm.dim'"),
        ("char_cnn", "filters", "missing field 'char_cnn.filters'"),
        ("char_cnn", "embedding", "missing field 'char_cnn.embedding'"),
    ],
)
def test_options_missing_a_field(copy, block, field, message):
    edit_options(copy[1], lambda d: d[block].pop(field))
    with pytest.raises(OptionsError, match=message):
        BiLM.from_hdf5(*copy)


def test_options_with_bad_values(copy):
    edit_options(copy[1], lambda d: d["char_cnn"].__setitem__("activation", "gelu"))
    with pytest.raises(OptionsError, match="activation must be one of"):
        BiLM.from_hdf5(*copy)
    edit_options(
        copy[1], lambda d: (d["char_cnn"].__setitem__("activation", "relu"), d["lstm"].__setitem__("dim", "big"))
    )
    with pytest.raises(OptionsError, match="'lstm.dim' must be int, found 'big'"):
        BiLM.from_hdf5(*copy)


def test_options_not_json(copy):
    copy[1].write_text("{not json")
    with pytest.raises(OptionsError, match="not valid JSON"):
        BiLM.from_hdf5(*copy)


def test_file_that_is_not_hdf5(copy):
    copy[0].write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 100)
    with pytest.raises(WeightFileError, match="is not an hdf5 file"):
        BiLM.from_hdf5(*copy)


def test_truncated_hdf5(copy):
    data = copy[0].read_bytes()
    copy[0].write_bytes(data[: len(data) // 2])
    with pytest.raises(WeightFileError):
        BiLM.from_hdf5(*copy)


def test_missing_files(tmp_path, copy):
    with pytest.raises(WeightFileError, match="not found"):
        BiLM.from_hdf5(tmp_path / "nope.hdf5", copy[1])
    with pytest.raises(OptionsError, match="not found"):
        BiLM.from_hdf5(copy[0], tmp_path / "nope.json")


def test_non_finite_weights(copy):
    with h5py.File(copy[0], "a") as f:
        f["CNN/b_cnn_0"][1] = numpy.nan
    with pytest.raises(WeightFileError, match="'CNN/b_cnn_0' holds NaN"):
        BiLM.from_hdf5(*copy)


def test_group_where_a_dataset_should_be(copy):
    with h5py.File(copy[0], "a") as f:
        del f["CNN_proj/W_proj"]
        f.create_group("CNN_proj/W_proj")
    with pytest.raises(WeightFileError, match="'CNN_proj/W_proj' is a group"):
        BiLM.from_hdf5(*copy)


def test_errors_are_value_errors():
    assert issubclass(WeightFileError, ValueError) and issubclass(OptionsError, ValueError)
