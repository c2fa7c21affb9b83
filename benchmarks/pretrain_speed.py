"""Pretraining speed: training tokens/s of a published biLM shape.

    python benchmarks/pretrain_speed.py [--shape small] [--device cpu|cuda]
        [--seconds 60] [--batch-size 32] [--vocab-size 50000] [--text FILE]
        [--precision fp32|bf16|fp16] [--threads N]

One training step is what ``python -m spacy_elmo pretrain`` does: char ids ->
BiLM (autograd recurrence, dropout 0.1) -> shared adaptive softmax over a
``vocab-size`` vocabulary, both directions -> backward -> clip -> Adam. Batches
are ``batch-size`` sentences of 5-40 tokens: synthetic Zipf text by default
(``make_sentences`` of ``benchmarks/inference_speed.py``), or lines of a real text file
tokenised with spaCy's English tokenizer. Tokens/s counts real tokens (not the
two sentence boundaries). Two warm-up steps are not timed. Runs on CUDA too
when ``--device cuda`` (default: CUDA if available, else CPU).
"""
import argparse
import platform
import time
from collections import Counter

import torch


def sentences_from(args):
    if args.text:
        import spacy

        tok = spacy.blank("en").tokenizer
        out = []
        with open(args.text, encoding="utf-8") as fin:
            for line in fin:
                words = [t.text for t in tok(line.strip()) if not t.is_space]
                for start in range(0, len(words), 40):
                    window = words[start : start + 40]
                    if len(window) >= 5:
                        out.append(window)
                if len(out) >= 20_000:
                    break
        return out
    from inference_speed import make_sentences

    return make_sentences(4096, seed=0, vocab_size=args.vocab_size)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shape", default="small", help="a published shape (small, medium, original)")
    parser.add_argument("--options", default=None, help="an options JSON instead of --shape")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--vocab-size", type=int, default=50_000)
    parser.add_argument("--text", default=None)
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "fp16"])
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    from inference_speed import flops_per_position, matmul_peak

    from spacy_elmo.bilm.options import BiLMOptions, published_options
    from spacy_elmo.pretrain.batches import Batcher, epoch_batches
    from spacy_elmo.pretrain.corpus import Corpus
    from spacy_elmo.pretrain.model import PretrainModel
    from spacy_elmo.pretrain.vocab import Vocab

    sentences = sentences_from(args)
    corpus = Corpus()
    for s in sentences:
        corpus.add_window(s)
    corpus.finalize()
    vocab = Vocab.build(Counter(w for s in sentences for w in s), args.vocab_size)
    # Pad to the full size so the softmax costs what a real 50k vocabulary costs.
    words = vocab.words + [f"@@unused{i}" for i in range(args.vocab_size - len(vocab))]
    vocab = Vocab(words)
    options = BiLMOptions.from_file(args.options) if args.options else published_options(args.shape)
    device = torch.device(args.device)
    torch.manual_seed(0)
    model = PretrainModel(options, len(vocab), dropout=0.1).to(device).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cuda", enabled=args.precision == "fp16")
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(args.precision)
    batcher = Batcher(corpus, vocab, options.max_characters_per_token)
    batches = epoch_batches(corpus.lengths(), args.batch_size, seed=0, epoch=0)

    def step(i):
        char_ids, targets, n_tokens = batcher(batches[i % len(batches)], device)
        with torch.autocast(device.type, dtype=dtype or torch.bfloat16, enabled=dtype is not None):
            nll_f, nll_b, n = model(char_ids, targets)
            loss = (nll_f + nll_b) / (2 * n)
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
        scaler.step(optimizer)
        scaler.update()
        return n_tokens, float(loss.detach())

    for i in range(2):
        step(i)
    if device.type == "cuda":
        torch.cuda.synchronize()
    tokens = steps = 0
    start = time.perf_counter()
    while time.perf_counter() - start < args.seconds:
        n, loss = step(2 + steps)
        tokens += n
        steps += 1
    if device.type == "cuda":
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    n_params = sum(p.numel() for p in model.parameters())
    print(f"machine: {platform.processor() or platform.machine()}, {torch.get_num_threads()} torch threads, "
          f"torch {torch.__version__}, device {device}"
          + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else ""))
    name = args.options or args.shape
    print(
        f"shape {name}: lstm {options.lstm_dim}/{options.projection_dim}, {n_params / 1e6:.1f}M parameters "
        f"(softmax {sum(p.numel() for p in model.head.parameters()) / 1e6:.1f}M, vocab {len(vocab)}, cutoffs "
        f"{model.head.cutoffs})"
    )
    print(f"text: {'real (' + args.text + ')' if args.text else 'synthetic Zipf'}, batch {args.batch_size} sentences, "
          f"precision {args.precision}")
    print(f"{steps} steps, {tokens} tokens in {elapsed:.1f} s: {tokens / elapsed:.0f} tokens/s, "
          f"{elapsed / max(steps, 1):.2f} s/step, last loss {loss:.3f}")
    # Nominal training FLOPs: 3x the biLM's nominal forward FLOPs per position
    # (flops_per_position: char-CNN over every char position, highway,
    # projection, both LSTM stacks; work the code skips still counts), plus
    # 3x the softmax's head product; boundaries excluded like the tokens.
    head = model.head.softmax.head
    per_token = 3 * (flops_per_position(options) + 2 * 2 * head.in_features * head.out_features)
    achieved = tokens * per_token / elapsed / 1e9
    if device.type == "cpu":
        peak = matmul_peak(dtype={"bf16": torch.bfloat16}.get(args.precision, torch.float32))
        print(f"nominal {per_token / 1e6:.1f} MFLOP per training token: {achieved:.1f} GFLOP/s = "
              f"{100 * achieved / peak:.0f}% of the measured {args.precision if args.precision == 'bf16' else 'fp32'} "
              f"matmul peak ({peak:.0f} GFLOP/s, {torch.get_num_threads()} threads)")
    else:
        print(f"nominal {per_token / 1e6:.1f} MFLOP per training token: {achieved:.1f} GFLOP/s")


if __name__ == "__main__":
    main()
