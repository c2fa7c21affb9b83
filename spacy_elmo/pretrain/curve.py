"""The learning curve (``learning_curve.png``) drawn from ``log.jsonl``;
matplotlib is optional (``spacy_elmo[pretrain]``)."""
import math
from pathlib import Path

from .errors import PretrainError
from .runlog import read_log


def plot_available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def plot_learning_curve(log_path: Path, png_path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = read_log(log_path)
    train = [r for r in records if r.get("event") == "train"]
    evals = [r for r in records if r.get("event") == "eval"]
    unigram = next((r.get("unigram_dev_ppl") for r in records if r.get("unigram_dev_ppl")), None)
    keys = (
        ("dev_ppl", "held-out, geometric mean"),
        ("dev_ppl_forward", "held-out, forward"),
        ("dev_ppl_backward", "held-out, backward"),
    )
    try:
        train_curve = [r["step"] for r in train], [math.exp(r["loss"]) for r in train]
        eval_curves = [([r["step"] for r in evals], [float(r[key]) for r in evals], label) for key, label in keys]
    except (KeyError, TypeError, ValueError, OverflowError) as err:
        raise PretrainError(
            f"{log_path}: a train or eval record lacks a number ({type(err).__name__}: {err}): the log is damaged"
        ) from None
    fig, ax = plt.subplots(figsize=(7, 4))
    if train:
        ax.plot(*train_curve, label="train (dropout on)", alpha=0.6)
    for steps, values, label in eval_curves:
        if evals:
            ax.plot(steps, values, marker="o", label=label)
    if unigram:
        ax.axhline(unigram, color="grey", linestyle="--", label="held-out unigram")
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("perplexity")
    ax.legend()
    ax.set_title("biLM pretraining")
    fig.tight_layout()
    fig.savefig(png_path, dpi=100)
    plt.close(fig)
