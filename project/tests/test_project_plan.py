"""project.yml reads as a plan: every grid command is a valid run_grid.py command line."""
import re
import shlex
from pathlib import Path

import typer
from weasel.util import load_project_config

import run_grid

PROJECT = Path(__file__).resolve().parents[1]


def grid_lines():
    config = load_project_config(PROJECT)
    return [(c["name"], line) for c in config["commands"] for line in c.get("script", [])
            if line.startswith("python scripts/run_grid.py")]


def test_every_grid_command_parses_and_is_short():
    app = typer.Typer(add_completion=False)
    app.command()(run_grid.main)
    command = typer.main.get_command(app)
    lines = grid_lines()
    names = {name for name, _ in lines}
    assert {"train-pos", "train-ner", "train-sentiment", "train-headline", "quick-train"} <= names
    assert sum(name == "train-headline" for name, _ in lines) == 10
    raw = (PROJECT / "project.yml").read_text(encoding="utf-8")
    for name, line in lines:
        args = shlex.split(line)[2:]
        ctx = command.make_context("run_grid.py", list(args))  # raises on an unknown or malformed option
        assert ctx.params["task"] in run_grid.CORPUS, (name, line)
        assert ctx.params["max_steps"] > 0 and ctx.params["eval_frequency"] > 0, (name, line)
    # As written, a grid line names its task, systems, fractions and seeds; the rest are shared vars.
    for text in raw.splitlines():
        if "scripts/run_grid.py" in text:
            assert sorted(re.findall(r"--[a-z-]+", text)) == ["--fractions", "--seeds", "--systems"], text


def test_no_memo_patch_left():
    raw = (PROJECT / "project.yml").read_text(encoding="utf-8")
    assert "memo" not in raw and "fetch_text.py" not in raw
    for cfg in (PROJECT / "configs").glob("elmo_*.cfg"):
        text = cfg.read_text(encoding="utf-8")
        assert '@callbacks = "spacy_elmo.training_cache.v1"' in text, cfg.name


def test_committed_configs_are_what_make_configs_writes(tmp_path):
    """configs/ is make_configs.py's output, so a choice made there (e.g. MiniLM's
    rate per task) is what the grid trains with."""
    import make_configs

    make_configs.main(tmp_path)
    written = sorted(p.name for p in tmp_path.glob("*.cfg"))
    assert written == sorted(p.name for p in (PROJECT / "configs").glob("*.cfg")) and len(written) == 12
    for name in written:
        assert (tmp_path / name).read_text(encoding="utf-8") == (PROJECT / "configs" / name).read_text(encoding="utf-8"), name
    rates = {task: re.search(r"^initial_rate = (\S+)$", (PROJECT / "configs" / f"transformer_{task}.cfg").read_text(),
                             re.M).group(1) for task in ("pos", "ner", "sentiment")}
    assert rates == {"pos": "0.0002", "ner": "0.0002", "sentiment": "5e-05"}
