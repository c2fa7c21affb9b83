"""english_campaign.py: blocks of unread slices, each continued from the
committed float16 export, on a machine that keeps its runs or a fresh one."""
import json
import shutil

import english_campaign
import h5py
import numpy
import pytest
import typer
from typer.testing import CliRunner

import common
from spacy_elmo.bilm.model import BiLM
from spacy_elmo.pretrain.reading import tokenise_slice
from tests.helpers.pretrain import make_lines


@pytest.fixture()
def campaign(tiny_run, tmp_path):
    tokens = tmp_path / "tokens"
    tokens.mkdir()
    for name, seed in (("000", 1), ("001", 2), ("002", 3), ("base-0", 4)):
        text = tmp_path / f"{name}.txt"
        text.write_text("\n".join(make_lines(40, seed)) + "\n", encoding="utf-8")
        tokenise_slice([text], tokens / f"{name}.npz", "en", 64)
    dev = tmp_path / "dev.txt"
    dev.write_text("\n".join(make_lines(10, 9)) + "\n", encoding="utf-8")
    state = dict(english_campaign.initial_state(), init=str(tiny_run / "export"), options=None,
                 vocab=str(tiny_run / "export" / "vocab.txt"), dev=str(dev), order=[2, 0, 1],
                 slices_per_block=1, base_parts=1, batch_size=16, warmup_steps=1)
    root = tmp_path / "campaign"
    root.mkdir()
    (root / "state.json").write_text(json.dumps(state), encoding="utf-8")
    args = ["--campaign", str(root), "--runs", str(tmp_path / "runs")]
    return root, tokens, tmp_path / "runs", args


def _windows(tokens, *names):
    return sum(common.slice_windows(tokens / f"{n}.npz") for n in names)


def test_blocks_chain_through_the_saved_float16_export(campaign):
    root, tokens, runs, args = campaign
    runner = CliRunner()
    result = runner.invoke(english_campaign.app, ["run", "--procs", "1", "--tokens", str(tokens), *args])
    assert result.exit_code == 0, result.output
    assert "--init" in result.output and "--resume" not in result.output
    assert "saved block 0" in result.output  # read to its end: saved by run
    result = runner.invoke(english_campaign.app, ["save", *args])
    assert result.exit_code == 0 and "nothing to save: block 0 was saved" in result.output, result.output
    state = json.loads((root / "state.json").read_text())
    (first,) = state["blocks"]
    assert first["slices"] == [2] and first["mix"] == "base-0" and first["complete"]
    log = [json.loads(line) for line in (runs / "block-0" / "log.jsonl").read_text().splitlines()]
    start = next(r for r in log if r.get("event") == "start")
    # exactly one epoch, as the trainer counts it
    assert first["epoch_steps"] == start["steps_per_epoch"] == first["steps"]
    assert first["epoch_steps"] == common.epoch_steps(_windows(tokens, "002", "base-0"), 16, 1)
    assert common.epoch_steps(319183, 256, 2) == 623
    with h5py.File(root / "weights.hdf5", "r") as fin:
        dtypes = set()
        fin.visititems(lambda n, o: dtypes.add(o.dtype) if isinstance(o, h5py.Dataset) else None)
    assert dtypes == {numpy.dtype(numpy.float16)}
    # the float16 copy is the exported model to float16 precision
    full = BiLM.from_hdf5(runs / "block-0" / "export" / "weights.hdf5", runs / "block-0" / "export" / "options.json")
    half = BiLM.from_hdf5(root / "weights.hdf5", root / "options.json")
    for (name, a), (_, b) in zip(full.state_dict().items(), half.state_dict().items()):
        assert numpy.allclose(a.numpy(), b.numpy(), rtol=1e-3, atol=1e-4), name

    # a fresh machine: no runs; the next block starts from the committed export
    shutil.rmtree(runs)
    result = runner.invoke(english_campaign.app, ["run", "--procs", "1", "--tokens", str(tokens), *args])
    assert result.exit_code == 0, result.output
    assert f"--init {root} " in result.output and "saved block 1" in result.output
    state = json.loads((root / "state.json").read_text())
    assert [b["slices"] for b in state["blocks"]] == [[2], [0]]
    assert english_campaign.tokens_read(state) == sum(b["tokens"] for b in state["blocks"]) > 0
    status = runner.invoke(english_campaign.app, ["status", *args]).output
    assert "slices begun 2 of 3" in status and "starts block 2: slices [1]" in status


def test_run_reads_blocks_in_turn_saving_each_one_read_to_its_end(campaign):
    root, tokens, runs, args = campaign
    runner = CliRunner()
    result = runner.invoke(english_campaign.app, ["run", "--procs", "1", "--blocks", "2", "--tokens", str(tokens),
                                                  *args])
    assert result.exit_code == 0, result.output
    state = json.loads((root / "state.json").read_text())
    assert [(b["slices"], b["complete"]) for b in state["blocks"]] == [([2], True), ([0], True)]
    assert result.output.count("saved block") == 2 and f"--init {root} " in result.output
    second = BiLM.from_hdf5(root / "weights.hdf5", root / "options.json")
    block1 = BiLM.from_hdf5(runs / "block-1" / "export" / "weights.hdf5", runs / "block-1" / "export" / "options.json")
    for (name, a), (_, b) in zip(block1.state_dict().items(), second.state_dict().items()):
        assert numpy.allclose(a.numpy(), b.numpy(), rtol=1e-3, atol=1e-4), name
    # less than a minute left: no block is begun
    result = runner.invoke(english_campaign.app, ["run", "--procs", "1", "--minutes", "0.5", "--tokens", str(tokens),
                                                  *args])
    assert result.exit_code == 0 and "spacy_elmo pretrain" not in result.output
    assert not (runs / "block-2").exists()


def test_a_block_saved_in_part_is_resumed_here_and_read_on_from_its_export_on_a_fresh_machine(campaign):
    root, tokens, runs, _ = campaign
    state = english_campaign.load_state(root)
    steps = common.epoch_steps(_windows(tokens, "002", "base-0"), 16, 2)
    state["blocks"] = [{"block": 0, "slices": [2], "mix": "base-0", "seed": 100, "epoch_steps": steps, "steps": 4,
                        "tokens": 100, "complete": False}]
    # its run is gone: the block goes on from the saved export at the step it was saved
    block = english_campaign.current_block(state, runs)
    assert (block["block"], block["slices"], block["resume"], block["start_step"]) == (0, [2], False, 4)
    argv = english_campaign.pretrain_command(state, block, root, tokens, runs, 2, 30)
    assert argv[argv.index("--init") + 1] == str(root) and "--resume" not in argv and "--options" not in argv
    assert argv[argv.index("--start-step") + 1] == "4" and argv[argv.index("--max-steps") + 1] == str(steps)
    assert "torch.distributed.run" in argv and argv[-2:] == ["--time-limit", "30"]
    # in the same order only: with the processes it was read with
    with pytest.raises(typer.BadParameter, match="another number of processes .* --procs it was read with"):
        english_campaign.pretrain_command(state, block, root, tokens, runs, 1, 30)
    # its run is still here: continued where it stopped
    (runs / "block-0" / "checkpoints").mkdir(parents=True)
    (runs / "block-0" / "checkpoints" / "last.pt").write_bytes(b"")
    block = english_campaign.current_block(state, runs)
    assert (block["block"], block["slices"], block["resume"]) == (0, [2], True)
    argv = english_campaign.pretrain_command(state, block, root, tokens, runs, 1, None)
    # with the settings it began with (the trainer refuses a resume whose --init or --options differ)
    assert argv[-1] == "--resume" and argv[argv.index("--init") + 1] == state["init"]
    # a run that itself began at a saved step resumes with that --start-step
    (runs / "block-0" / "config.json").write_text(json.dumps({"start_step": 4}), encoding="utf-8")
    block = english_campaign.current_block(state, runs)
    assert (block["resume"], block["start_step"]) == (True, 4)
    argv = english_campaign.pretrain_command(state, block, root, tokens, runs, 2, None)
    assert argv[-1] == "--resume" and argv[argv.index("--start-step") + 1] == "4"
    assert argv[argv.index("--init") + 1] == str(root)


def test_a_block_read_on_from_its_export_ends_where_one_run_ends(campaign, tmp_path):
    """A block saved in part, its run lost: `run` reads the rest of its epoch
    and records the block as one run would (its steps and tokens)."""
    root, tokens, runs, args = campaign
    runner = CliRunner()
    whole = tmp_path / "whole"
    shutil.copytree(root, whole)
    result = runner.invoke(english_campaign.app, ["run", "--procs", "1", "--tokens", str(tokens), "--campaign",
                                                  str(whole), "--runs", str(tmp_path / "whole-runs")])
    assert result.exit_code == 0, result.output
    (read,) = json.loads((whole / "state.json").read_text())["blocks"]
    # the same block saved in part at step 2, from a run this machine no longer has
    state = json.loads((root / "state.json").read_text())
    state["blocks"] = [dict(read, steps=2, tokens=1, complete=False)]
    (root / "state.json").write_text(json.dumps(state), encoding="utf-8")
    for name in ("weights.hdf5", "softmax.hdf5", "options.json", "vocab.txt"):
        shutil.copy(tmp_path / "whole-runs" / "block-0" / "export" / name, root / name)
    assert "continues (from the saved export, at step 2) block 0" in runner.invoke(
        english_campaign.app, ["status", *args]).output
    result = runner.invoke(english_campaign.app, ["run", "--procs", "1", "--tokens", str(tokens), *args])
    assert result.exit_code == 0, result.output
    assert "--start-step 2" in result.output and "saved block 0" in result.output
    (again,) = json.loads((root / "state.json").read_text())["blocks"]
    assert again == read


def test_a_missing_slice_names_the_command_that_makes_it(campaign):
    root, tokens, runs, _ = campaign
    (tokens / "002.npz").unlink()
    state = english_campaign.load_state(root)
    with pytest.raises(typer.BadParameter, match=r"002\.npz.*tokenise_slices\.py .*--slices 2 --base-parts 1"):
        english_campaign.pretrain_command(state, english_campaign.current_block(state, runs), root, tokens, runs,
                                          1, None)


def test_a_damaged_state_is_named(tmp_path):
    (tmp_path / "state.json").write_text("{", encoding="utf-8")
    with pytest.raises(typer.BadParameter, match="state.json is not JSON"):
        english_campaign.load_state(tmp_path)


def test_tokenise_slices_reads_named_slices_and_cuts_the_registry_corpus_in_parts(tmp_path):
    import tokenise_slices

    assert tokenise_slices.parse_slices("82-84, 3") == [82, 83, 84, 3]
    for bad in ("9-2", "x"):
        with pytest.raises(typer.BadParameter, match="--slices|slice number|backwards"):
            tokenise_slices.parse_slices(bad)
    base = tmp_path / "pretrain2"
    (base / "train").mkdir(parents=True)
    for i, name in enumerate(tokenise_slices.BASE_SOURCES):
        (base / "train" / f"{name}.txt").write_text("".join(f"{name} line {j} .\n" for j in range(i + 2)))
    corpus = tmp_path / "pretrain3"
    (corpus / "train").mkdir(parents=True)
    for n in (0, 1, 2):
        (corpus / "train" / f"{n:03d}.txt").write_text("\n".join(make_lines(5, n)) + "\n")
    result = CliRunner().invoke(_tokenise_app(tokenise_slices),
                                [str(corpus), "--base", str(base), "--slices", "2,0", "--base-parts", "3"])
    assert result.exit_code == 0, result.output
    made = sorted(p.name for p in (corpus / "tokens").glob("*.npz"))
    assert made == ["000.npz", "002.npz", "base-0.npz", "base-1.npz", "base-2.npz", "base.npz"]
    parts = [(corpus / "base" / f"part-{j}.txt").read_text().splitlines() for j in range(3)]
    every = [line for name in tokenise_slices.BASE_SOURCES
             for line in (base / "train" / f"{name}.txt").read_text().splitlines()]
    assert sorted(sum(parts, [])) == sorted(every) and [len(p) for p in parts] == [len(every[j::3]) for j in range(3)]
    result = CliRunner().invoke(_tokenise_app(tokenise_slices), [str(corpus), "--base", str(base), "--slices", "7"])
    assert result.exit_code != 0 and "007.txt" in result.output


def _tokenise_app(module):
    app = typer.Typer()
    app.command()(module.main)
    return app


def test_bf16_only_where_the_cpu_has_it(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("flags\t\t: fpu avx2 avx512f avx512_vnni\n")
    assert not english_campaign.native_bf16(info)
    info.write_text("flags\t\t: fpu avx2 avx512f avx512_bf16\n")
    assert english_campaign.native_bf16(info)
    assert not english_campaign.native_bf16(tmp_path / "absent")


def test_training_processes_keep_glibcs_heap_unless_told_otherwise(campaign, monkeypatch):
    root, tokens, runs, args = campaign
    for name in english_campaign.KEEP_HEAP:
        monkeypatch.delenv(name, raising=False)
    given = {"PATH": "/bin", "MALLOC_TRIM_THRESHOLD_": "1"}
    assert english_campaign.child_environment(True, given) == dict(given, MALLOC_MMAP_MAX_="0")
    assert english_campaign.child_environment(False, given) == given
    started = []
    monkeypatch.setattr(english_campaign.subprocess, "call", lambda argv, cwd, env: started.append(env) or 0)
    runner = CliRunner()
    base = ["run", "--procs", "1", "--tokens", str(tokens), *args]
    result = runner.invoke(english_campaign.app, base)
    # the command is echoed with the settings it adds, as a shell line that repeats it
    assert result.output.startswith(f"MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_={64 << 30} ")
    assert started[-1]["MALLOC_MMAP_MAX_"] == "0" and started[-1]["MALLOC_TRIM_THRESHOLD_"] == str(64 << 30)
    runner.invoke(english_campaign.app, base + ["--release-heap"])
    assert "MALLOC_MMAP_MAX_" not in started[-1] and "MALLOC_TRIM_THRESHOLD_" not in started[-1]
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "4096")
    result = runner.invoke(english_campaign.app, base + ["--dry-run"])
    assert result.output.startswith("MALLOC_MMAP_MAX_=0 ") and "MALLOC_TRIM_THRESHOLD_" not in result.output


def test_run_tokenises_what_the_block_reads_and_the_machine_lacks(campaign):
    root, tokens, runs, _ = campaign
    corpus = tokens.parent
    (corpus / "train").mkdir()
    (corpus / "train" / "002.txt").write_text("\n".join(make_lines(30, 5)) + "\n", encoding="utf-8")
    base = corpus / "pretrain2"
    (base / "train").mkdir(parents=True)
    for i, name in enumerate(common.BASE_SOURCES):
        (base / "train" / f"{name}.txt").write_text("".join(f"{name} line {j} .\n" for j in range(i + 3)))
    state = english_campaign.load_state(root)
    block = english_campaign.current_block(state, runs)
    assert block["slices"] == [2] and block["mix"] == "base-0"
    kept = (tokens / "base-0.npz").read_bytes()
    (tokens / "002.npz").unlink()
    made = english_campaign.prepare_block(state, block, tokens, base)
    # only the missing slice, from its text; the registry part on the machine is kept as it is
    assert made == [tokens / "002.npz"] and (tokens / "base-0.npz").read_bytes() == kept
    assert common.slice_windows(tokens / "002.npz") == 30
    (tokens / "base-0.npz").unlink()
    state["base_parts"] = 2
    assert english_campaign.prepare_block(state, block, tokens, base) == [tokens / "base-0.npz"]
    every = [line for name in common.BASE_SOURCES
             for line in (base / "train" / f"{name}.txt").read_text().splitlines()]
    assert (corpus / "base" / "part-0.txt").read_text().splitlines() == every[0::2]
    # what cannot be made is named, with what makes it
    (tokens / "002.npz").unlink()
    (corpus / "train" / "002.txt").unlink()
    with pytest.raises(typer.BadParameter, match=r"002\.txt is missing: build corpus v3 first \(scripts/fetch_books"):
        english_campaign.prepare_block(state, block, tokens, base)
    (tokens / "002.npz").write_bytes(b"")
    (tokens / "base-0.npz").unlink()
    (base / "train" / "wordnet.txt").unlink()
    with pytest.raises(typer.BadParameter, match=r"lacks wordnet\.txt: fetch the registry corpus"):
        english_campaign.prepare_block(state, block, tokens, base)
