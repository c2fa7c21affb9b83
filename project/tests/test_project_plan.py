"""project.yml reads as a plan: every grid command is a valid run_grid.py command line."""
import ast
import re
import shlex
from pathlib import Path

import run_grid
import typer
from weasel.util import load_project_config

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
    """configs/ is make_configs.py's output, so a choice made there is what the
    grid trains with. The transformer configs need spacy-transformers to be
    filled (not a test dependency): for them, the partial config's choices
    (MiniLM's rate per task) must be the committed ones."""
    import make_configs

    committed = sorted(p.name for p in (PROJECT / "configs").glob("*.cfg"))
    assert committed == sorted(f"{s}_{t}.cfg" for s in make_configs.SYSTEMS for t in make_configs.TASKS)
    for system in make_configs.SYSTEMS:
        for task in make_configs.TASKS:
            name = f"{system}_{task}.cfg"
            text = (PROJECT / "configs" / name).read_text(encoding="utf-8")
            if system == "transformer":
                rate = float(re.search(r"^initial_rate = (\S+)$", text, re.M).group(1))
                assert rate == float(make_configs.TRANSFORMER_RATE[task]), name
                assert f"initial_rate = {make_configs.TRANSFORMER_RATE[task]}" in make_configs.build(system, task)
                continue
            assert make_configs.write(system, task, tmp_path).read_text(encoding="utf-8") == text, name
    assert {t: float(r) for t, r in make_configs.TRANSFORMER_RATE.items()} == {
        "pos": 2e-4,
        "ner": 2e-4,
        "sentiment": 5e-5,
    }


def test_every_script_is_a_command_and_imports_only_the_shared_module():
    """Each script in scripts/ is run by a command of project.yml (common.py is
    the one module they share), and no script imports another one."""
    config = load_project_config(PROJECT)
    lines = " ".join(line for c in config["commands"] for line in c.get("script", []))
    scripts = sorted((PROJECT / "scripts").glob("*.py"))
    assert [p.name for p in scripts if p.name != "common.py" and f"scripts/{p.name}" not in lines] == []
    names = {p.stem for p in scripts}
    for path in scripts:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
            assert [m for m in modules if m in names and m != "common"] == [], path.name


def test_no_command_or_workflow_name_carries_a_version():
    config = load_project_config(PROJECT)
    names = [c["name"] for c in config["commands"]] + list(config["workflows"])
    assert [n for n in names if re.search(r"(-v\d+|\d)$", n)] == []
