"""pretrain_blocks.py: each block of slices is one epoch from the last block's export."""
import json
import math

import pretrain_blocks
from typer.testing import CliRunner

from spacy_elmo.pretrain import load_checkpoint
from spacy_elmo.pretrain.reading import tokenise_slice
from tests.helpers.pretrain import make_lines


def _slice(tmp_path, name, seed):
    text = tmp_path / f"{name}.txt"
    text.write_text("\n".join(make_lines(60, seed)) + "\n", encoding="utf-8")
    return tmp_path / f"{name}.npz", tokenise_slice([text], tmp_path / f"{name}.npz", "en", 64)


def test_blocks_read_each_slice_once_and_chain_their_exports(tiny_run, tmp_path):
    (a, corpus_a), (b, corpus_b) = _slice(tmp_path, "a", 1), _slice(tmp_path, "b", 2)
    out = tmp_path / "blocks"
    result = CliRunner().invoke(pretrain_blocks.app, [
        "-o", str(out), "--init", str(tiny_run / "export"), "--vocab", str(tiny_run / "export" / "vocab.txt"),
        "--batch-size", "16", "--warmup-steps", "1", "--eval-every", "100", "--checkpoint-every", "100",
        "--block", str(a), "--block", f"{b} {a}", "--block", str(tmp_path / "missing.npz"),
    ])
    assert result.exit_code == 1, result.output  # the third block's slice is missing
    blocks = json.loads((out / "blocks.json").read_text())
    assert [r["slices"] for r in blocks] == [["a.npz"], ["b.npz", "a.npz"]]
    windows_a, windows_b = corpus_a.stats.windows, corpus_b.stats.windows
    assert [r["steps"] for r in blocks] == [math.ceil(windows_a / 16), math.ceil((windows_a + windows_b) / 16)]
    assert [r["epoch_steps"] for r in blocks] == [r["steps"] for r in blocks]
    # one epoch: every token of the block's slices read once
    assert [r["tokens"] for r in blocks] == [corpus_a.stats.tokens, corpus_a.stats.tokens + corpus_b.stats.tokens]
    assert blocks[1]["init"] == str(out / "block-0" / "export")
    first = load_checkpoint(out / "block-0" / "checkpoints" / "last.pt")
    assert first["config"]["init"] == str(tiny_run / "export") and first["config"]["seed"] == 13
    assert load_checkpoint(out / "block-1" / "checkpoints" / "last.pt")["config"]["seed"] == 14
    assert (out / "block-1" / "export" / "weights.hdf5").is_file()
    assert "block 2: slices missing" in result.output and "missing.npz" in result.output
    assert f"last export: {out / 'block-1' / 'export'}" in result.output


def test_a_passed_deadline_starts_no_block(tiny_run, tmp_path):
    a, _ = _slice(tmp_path, "a", 1)
    out = tmp_path / "blocks"
    result = CliRunner().invoke(pretrain_blocks.app, [
        "-o", str(out), "--init", str(tiny_run / "export"), "--vocab", str(tiny_run / "export" / "vocab.txt"),
        "--deadline", "0", "--block", str(a),
    ])
    assert result.exit_code == 0, result.output
    assert not (out / "block-0").exists() and not (out / "blocks.json").exists()


def test_a_mixed_slice_is_read_in_every_block(tiny_run, tmp_path):
    (a, corpus_a), (b, corpus_b) = _slice(tmp_path, "a", 1), _slice(tmp_path, "b", 2)
    out = tmp_path / "blocks"
    result = CliRunner().invoke(pretrain_blocks.app, [
        "-o", str(out), "--init", str(tiny_run / "export"), "--vocab", str(tiny_run / "export" / "vocab.txt"),
        "--batch-size", "16", "--warmup-steps", "1", "--mix", str(b), "--block", str(a), "--block", str(a),
    ])
    assert result.exit_code == 0, result.output
    blocks = json.loads((out / "blocks.json").read_text())
    assert [r["slices"] for r in blocks] == [["a.npz", "b.npz"]] * 2
    assert [r["tokens"] for r in blocks] == [corpus_a.stats.tokens + corpus_b.stats.tokens] * 2
