"""Word-sense accuracy of a biLM against random-weights biLMs of its shape.

For each method (nearest sense centroid, 1-NN) and each layer (0..L and the
mean of the layers), the accuracy of the model on a senses set
(default: the packaged crossed-frame set, leave-one-frame-out) and the mean,
standard deviation, minimum and maximum over ``--seeds`` random-weights
biLMs of the same shape (``spacy_elmo.senses.random_like``, seeds 0..N-1).
Prints a Markdown table; ``--json FILE`` also writes the figures (for the
shipped model, with the sha256 of its weights): the shipped model's are
``tests/fixtures/senses_shipped.json``, which ``tests/test_shipped_model.py``
checks; rewrite it with this script whenever the shipped weights change.

    python benchmarks/senses_baseline.py [--model M] [--data FILE] [--seeds 10] [--json out.json]
"""
import argparse
import hashlib
import json
import statistics
from pathlib import Path

from spacy_elmo import hub
from spacy_elmo.loading import load_bilm
from spacy_elmo.senses import random_like, sense_eval

METHODS = ("centroid", "1nn")


def accuracies(bilm, data, method):
    return {str(r["layer"]): r["accuracy"] for r in sense_eval(bilm, data, method=method)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model",
        default=None,
        help="model name, directory, weights file or URL, as the CLI's --model (default: the shipped English biLM)",
    )
    parser.add_argument("--options", default=None)
    parser.add_argument("--data", default=None, help="senses set (default: the packaged English set)")
    parser.add_argument("--seeds", type=int, default=10, help="random-weights biLMs, seeds 0..N-1")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args()
    if args.seeds < 2:
        parser.error("--seeds must be >= 2 (the spread needs two)")
    model = load_bilm(args.model, args.options, progress=False).eval()
    figures = {
        "about": "Word-sense accuracy of a biLM and of random-weights biLMs of its shape (seeds 0..N-1), "
        "leave-one-frame-out, from `python benchmarks/senses_baseline.py --seeds N --json FILE`; "
        "for the shipped model rewrite tests/fixtures/senses_shipped.json this way whenever its weights change.",
        "data": "the packaged set (spacy_elmo/senses/senses_en.txt)" if args.data is None else Path(args.data).name,
    }
    if args.model is None:
        weights = (hub.SHIPPED_MODEL_DIR / "weights.hdf5").read_bytes()
        figures["weights_sha256"] = hashlib.sha256(weights).hexdigest()
    figures.update({"model": {}, "random": {}, "seeds": args.seeds})
    for method in METHODS:
        figures["model"][method] = accuracies(model, args.data, method)
        runs = [accuracies(random_like(model, seed), args.data, method) for seed in range(args.seeds)]
        figures["random"][method] = {
            layer: {
                "mean": statistics.mean(r[layer] for r in runs),
                "sd": statistics.stdev(r[layer] for r in runs),
                "min": min(r[layer] for r in runs),
                "max": max(r[layer] for r in runs),
                "seed0": runs[0][layer],
            }
            for layer in runs[0]
        }
    print(f"| method | layer | model | random, mean ± sd over {args.seeds} seeds | random min..max | model - random |")
    print("|---|---|---|---|---|---|")
    for method in METHODS:
        for layer, value in figures["model"][method].items():
            rand = figures["random"][method][layer]
            name = "mean" if layer == "mix" else layer
            print(
                f"| {method} | {name} | {100 * value:.1f}% | {100 * rand['mean']:.1f} ± {100 * rand['sd']:.1f}% "
                f"| {100 * rand['min']:.1f}..{100 * rand['max']:.1f}% | {100 * (value - rand['mean']):+.1f} |"
            )
    if args.json:
        rounded = {k: _round(v) for k, v in figures.items()}
        args.json.write_text(json.dumps(rounded, indent=1) + "\n", encoding="utf-8")


def _round(value):
    if isinstance(value, dict):
        return {k: _round(v) for k, v in value.items()}
    return round(value, 6) if isinstance(value, float) else value


if __name__ == "__main__":
    main()
