"""How the ``neighbours`` and ``senses`` commands (:mod:`spacy_elmo.cli.senses`)
show the results of :mod:`spacy_elmo.senses`: the table and the marked use.
Loading the model and tokenising are the command line's, as for every
command (:mod:`spacy_elmo.cli.inputs`)."""
from typing import Dict, List, Sequence


def format_table(rows: List[Dict], per_word: bool = False) -> str:
    """The rows of :func:`sense_eval` as a plain-text table."""
    lines = [f"{'layer':<6} {'accuracy':>13} {'items':>6} {'tied':>6}"]
    for row in rows:
        name = str(row["layer"]) if row["layer"] != "mix" else "mean"
        note = "  (context-free: chance by the tie rule)" if row["layer"] == 0 else ""
        lines.append(f"{name:<6} {100 * row['accuracy']:>12.1f}% {row['items']:>6} {row['tied']:>6}{note}")
    lines.append("chance: 50.0% (two balanced senses a word); ties across senses score 1/2")
    if per_word:
        words = sorted(rows[0]["per_word"])
        head = " ".join(f"{('mean' if r['layer'] == 'mix' else 'L' + str(r['layer'])):>6}" for r in rows)
        lines.append("")
        lines.append(f"{'word':<10} {head}")
        for w in words:
            lines.append(f"{w:<10} " + " ".join(f"{100 * r['per_word'][w]:>5.0f}%" for r in rows))
    return "\n".join(lines)


def mark(tokens: Sequence[str], position: int) -> str:
    """The sentence with the use at ``position`` in brackets."""
    return " ".join(f"[{t}]" if i == position else t for i, t in enumerate(tokens))
