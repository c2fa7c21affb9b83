"""ELMo the paper's way: ``[x_k; ELMo_k]`` into a trainable task encoder.

Peters et al. (2018), section 3.3: freeze the biLM, concatenate the task
mix ``ELMo_k`` with the task's own context-free token representation
``x_k`` and pass ``[x_k; ELMo_k]`` into the task's encoder (an RNN in the
paper); optionally include ELMo again at the encoder's output,
``[h_k; ELMo'_k]``, with a second mix of its own.

``spacy_elmo.ElmoTok2Vec.v1`` is that, built from spaCy's pieces:

    x_k     = embed(doc)                          e.g. spacy.MultiHashEmbed.v2, width W
    e_k     = ElmoListener(doc)                   the component's own scalar mix
    z_k     = Maxout_W([x_k; e_k])                 input mixing layer (learned)
    h_k     = encode(z_k)                          e.g. spacy.MaxoutWindowEncoder.v2, width W
    output  = h_k, or [h_k; Linear(ELMo'_k)]       with ``output_width > 0``

The input mixing layer is a Maxout (3 pieces, layer-normalised, as in the
last layer of spaCy's MultiHashEmbed) that brings ``[x_k; ELMo_k]`` back to
the encoder's width: spaCy's window encoders need input and output of the
same width, where the paper's RNN takes any input width.

It is a ``tok2vec`` for one component (tagger, ner, textcat, ...): the
component owns its embedding, its encoder and its ELMo mix(es); the ELMo
layers come from the pipeline's ``elmo`` component through listeners, so
the biLM runs once per batch for all components.
"""
from typing import List, Optional

from spacy.tokens import Doc
from thinc.api import Maxout, Model, chain, concatenate, with_array
from thinc.types import Floats2d

from .listener import ElmoListener


def ElmoTok2Vec(
    embed: Model[List[Doc], List[Floats2d]],
    encode: Model[List[Floats2d], List[Floats2d]],
    upstream: str = "*",
    grad_factor: float = 0.0,
    layer_norm: bool = False,
    l2: float = 0.0,
    dropout: float = 0.0,
    elmo_width: Optional[int] = None,
    output_width: int = 0,
) -> Model[List[Doc], List[Floats2d]]:
    """The task embedding and ELMo, concatenated, into a trainable encoder.

    embed: the task's own token embedding, ``List[Doc] -> List[Floats2d]``
        (e.g. ``spacy.MultiHashEmbed.v2``).
    encode: the trainable context encoder, ``List[Floats2d] -> List[Floats2d]``
        with input width = output width = its ``nO`` (e.g.
        ``spacy.MaxoutWindowEncoder.v2``, ``spacy.TorchBiLSTMEncoder.v1``).
    upstream, grad_factor, layer_norm, l2, dropout: of the ELMo listener(s)
        (see ``spacy_elmo.ElmoListener.v1``); ``grad_factor = 0`` keeps the
        biLM frozen, as in the paper.
    elmo_width: project the input ELMo mix to this width before the
        concatenation (None: keep the biLM's 2*projection_dim).
    output_width: 0 (default): ELMo at the input only. > 0: ELMo again at
        the output, with its own mix, projected to this width and
        concatenated with the encoder's output (width W + output_width).
    """
    if not encode.has_dim("nO") or encode.get_dim("nO") is None:
        raise ValueError("ElmoTok2Vec needs an encoder with a known width (nO)")
    if output_width < 0:
        raise ValueError(f"output_width must be >= 0, found {output_width}")
    width = encode.get_dim("nO")
    elmo_in = ElmoListener(upstream, grad_factor, layer_norm, l2, dropout, elmo_width)
    mixer: Model[List[Floats2d], List[Floats2d]] = with_array(Maxout(nO=width, nP=3, dropout=0.0, normalize=True))
    model: Model[List[Doc], List[Floats2d]] = chain(concatenate(embed, elmo_in), mixer, encode)
    if output_width:
        elmo_out = ElmoListener(upstream, grad_factor, layer_norm, l2, dropout, output_width)
        model = concatenate(model, elmo_out)
    model.set_dim("nO", width + output_width)
    model.name = "elmo_tok2vec"
    return model
