"""`perplexity`: an exported model's held-out perplexity on new text."""
import pytest
import torch
from typer.testing import CliRunner

from spacy_elmo.cli import app  # noqa: E402
from spacy_elmo.pretrain import pretrain  # noqa: E402
from spacy_elmo.pretrain.errors import PretrainError  # noqa: E402
from spacy_elmo.pretrain.perplexity import perplexity, perplexity_parts  # noqa: E402
from tests.helpers.pretrain import make_lines, tiny_config, write_corpus  # noqa: E402


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    tmp = tmp_path_factory.mktemp("ppl")
    corpus = write_corpus(tmp, 120)
    dev = tmp / "dev.txt"
    dev.write_text("\n".join(make_lines(30, seed=7)) + "\n", encoding="utf-8")
    config = tiny_config(tmp, corpus, max_steps=20, dev=[str(dev)], max_tokens=16, eval_every=20)
    summary = pretrain(config, progress=False)
    torch.set_num_threads(threads)
    return tmp, dev, summary


def test_equals_the_held_out_figure_pretraining_logged(run):
    tmp, dev, summary = run
    result = perplexity(tmp / "out" / "export", [dev], max_tokens=16, batch_size=5)
    logged = summary["dev"]
    assert result["tokens"] == logged["dev_tokens"]
    assert result["ppl_forward"] == pytest.approx(logged["dev_ppl_forward"], rel=1e-4)
    assert result["ppl_backward"] == pytest.approx(logged["dev_ppl_backward"], rel=1e-4)
    assert result["ppl"] == pytest.approx(logged["dev_ppl"], rel=1e-4)
    assert 0.0 <= result["unk_fraction"] < 1.0


def test_parts_score_each_part_alone_and_the_whole_as_one(run, tmp_path):
    tmp, dev, _ = run
    lines = dev.read_text(encoding="utf-8").splitlines()
    first, second = tmp_path / "a" / "first.txt", tmp_path / "second.txt"
    first.parent.mkdir()
    first.write_text("\n".join(lines[:12]) + "\n", encoding="utf-8")
    second.write_text("\n".join(lines[12:]) + "\n", encoding="utf-8")
    model = tmp / "out" / "export"
    parts = perplexity_parts(model, [[first.parent], [second]], max_tokens=16, batch_size=7)
    assert len(parts) == 3
    for part, path in zip(parts, [first, second]):
        alone = perplexity(model, [path], max_tokens=16, batch_size=7)
        assert part["tokens"] == alone["tokens"]
        assert part["ppl"] == pytest.approx(alone["ppl"], rel=1e-6)
    whole = perplexity(model, [dev], max_tokens=16, batch_size=7)
    assert parts[0]["tokens"] + parts[1]["tokens"] == parts[2]["tokens"] == whole["tokens"]
    for key in ("ppl_forward", "ppl_backward", "ppl", "unk_fraction"):
        assert parts[2][key] == pytest.approx(whole[key], rel=1e-5)
    assert parts[0]["ppl"] != pytest.approx(parts[1]["ppl"], rel=1e-3)
    runner = CliRunner()
    result = runner.invoke(app, ["perplexity", str(first.parent), str(second), "--each", "--model", str(model),
                                 "--max-tokens", "16"])
    assert result.exit_code == 0, result.output
    printed = result.output.strip().splitlines()
    assert [line.split(": perplexity")[0] for line in printed] == [str(first.parent), str(second), "all"]
    assert f"mean {whole['ppl']:.2f} over {whole['tokens']:,} tokens" in printed[2]


def test_a_directory_without_the_softmax_is_a_clear_error(run, tmp_path):
    tmp, dev, _ = run
    partial = tmp_path / "partial"
    partial.mkdir()
    for name in ("weights.hdf5", "options.json"):
        (partial / name).write_bytes((tmp / "out" / "export" / name).read_bytes())
    with pytest.raises(PretrainError, match="lacks vocab.txt, softmax.hdf5"):
        perplexity(partial, [dev])


def test_cli_prints_the_figures_and_reports_errors(run, tmp_path):
    tmp, dev, _ = run
    runner = CliRunner()
    result = runner.invoke(app, ["perplexity", str(dev), "--model", str(tmp / "out" / "export"), "--max-tokens", "16"])
    assert result.exit_code == 0, result.output
    assert "perplexity forward" in result.output and "<UNK>" in result.output
    result = runner.invoke(app, ["perplexity", str(dev), "--model", str(tmp_path)])
    assert result.exit_code == 2
    assert "lacks" in result.output
