"""Listeners: how downstream components (tagger, ner, textcat, ...) get ELMo.

``spacy_elmo.ElmoListener.v1`` is a ``tok2vec`` for any component:
a receiver layer that gets the ``elmo`` component's per-Doc layers, followed
by the component's own :mod:`scalar mix <spacy_elmo.layers.scalar_mix>`,
optional dropout and an optional linear projection to ``width``.

During ``nlp.update`` the ``elmo`` component runs the biLM once per batch and
broadcasts its output to every receiver (spaCy's listener protocol, as in
spacy-transformers and spaCy's ``tok2vec``). Outside training, and when the
``elmo`` component is in ``frozen_components`` but annotating, a receiver
reads the layers stored on ``Doc._.elmo``.

``grad_factor`` is the one fine-tuning knob: each receiver's scales the
gradient it sends back into the biLM, and the biLM is fine-tuned when at
least one receiver has ``grad_factor > 0`` (and the ``elmo`` component is not
``frozen``); 0 (the default) keeps it frozen. After
``nlp.replace_listeners`` the receiver's ``grad_factor`` goes with it into
``spacy_elmo.ElmoMix.v1`` (:func:`BiLMWithGradFactor`).
"""
from typing import Callable, List, Optional

from spacy.tokens import Doc
from thinc.api import Dropout, Linear, Model, chain, concatenate, with_array
from thinc.types import Floats2d, Floats3d

from .scalar_mix import ScalarMix


class ElmoListenerLayer(Model):
    """Receives the ``elmo`` component's output: ``List[Doc] -> List[Floats3d]``."""

    name = "elmo_listener"

    def __init__(self, upstream_name: str = "*", grad_factor: float = 0.0) -> None:
        if grad_factor < 0:
            raise ValueError(f"grad_factor must be >= 0, found {grad_factor}")
        Model.__init__(
            self,
            name=self.name,
            forward=_listener_forward,
            dims={"nL": None, "nO": None},
            attrs={"grad_factor": grad_factor},
        )
        self.upstream_name = upstream_name
        self._batch_id: Optional[int] = None
        self._outputs: Optional[List[Floats3d]] = None
        self._backprop: Optional[Callable] = None

    @classmethod
    def get_batch_id(cls, docs: List[Doc]) -> int:
        return sum(sum(token.orth for token in doc) + len(doc) for doc in docs)

    def receive(self, batch_id: int, outputs: List[Floats3d], backprop: Callable) -> None:
        self._batch_id = batch_id
        self._outputs = outputs
        self._backprop = backprop

    def backprop_and_clear(self, d_outputs):
        backprop = self._backprop
        self._batch_id = self._outputs = self._backprop = None
        if backprop is None:
            return []
        factor = self.attrs["grad_factor"]
        return backprop([d * factor for d in d_outputs] if factor > 0 else None)

    def stored_layers(self, docs: List[Doc]) -> List[Floats3d]:
        outputs = []
        for doc in docs:
            data = doc._.elmo if doc.has_extension("elmo") else None
            if data is None:
                outputs.append(self.ops.alloc3f(self.get_dim("nL"), len(doc), self.get_dim("nO")))
            elif data.layers is None:
                raise ValueError(
                    "An ELMo listener needs all biLM layers on Doc._.elmo, but the elmo "
                    "component stores only vectors: set store = \"layers\" in its config."
                )
            else:
                outputs.append(self.ops.asarray3f(data.layers.astype("float32", copy=False)))
        return outputs


def _listener_forward(model: ElmoListenerLayer, docs: List[Doc], is_train: bool):
    if is_train and model._batch_id is not None:
        batch_id = model.get_batch_id(docs)
        if batch_id != model._batch_id:
            raise ValueError(
                "The ELMo listener got a batch different from the one the elmo component "
                f"broadcast (ids {batch_id} vs {model._batch_id}). Is the elmo component "
                "updated in the same nlp.update call, before this component?"
            )
        return model._outputs, model.backprop_and_clear
    # Prediction, or training with a frozen (annotating) elmo component.
    return model.stored_layers(docs), lambda d_outputs: []


def build_mix(
    inputs: Model[List[Doc], List[Floats3d]],
    layer_norm: bool,
    l2: float,
    dropout: float,
    width: Optional[int],
) -> Model[List[Doc], List[Floats2d]]:
    layers: List[Model] = [inputs, ScalarMix(layer_norm=layer_norm, l2=l2)]
    if dropout:
        layers.append(Dropout(dropout))
    if width is not None:
        layers.append(with_array(Linear(nO=width)))
    model: Model[List[Doc], List[Floats2d]] = chain(*layers)
    if width is not None:
        model.set_dim("nO", width)
    return model


def ElmoListener(
    upstream: str = "*",
    grad_factor: float = 0.0,
    layer_norm: bool = False,
    l2: float = 0.0,
    dropout: float = 0.0,
    width: Optional[int] = None,
) -> Model[List[Doc], List[Floats2d]]:
    """ELMo vectors for a downstream component, with the component's own mix.

    upstream: name of the elmo component to listen to ("*": any).
    grad_factor: scale of the gradient sent into the biLM (0: frozen biLM).
    layer_norm, l2: see :func:`spacy_elmo.layers.scalar_mix.ScalarMix`.
    dropout: dropout on the mixed vectors (the paper uses some; 0 by default).
    width: project the mixed vectors to this width (None: keep 2*projection_dim).
    """
    return build_mix(ElmoListenerLayer(upstream, grad_factor), layer_norm, l2, dropout, width)


def ElmoMix(
    bilm: Model[List[Doc], List[Floats3d]],
    layer_norm: bool = False,
    l2: float = 0.0,
    dropout: float = 0.0,
    width: Optional[int] = None,
    grad_factor: float = 0.0,
) -> Model[List[Doc], List[Floats2d]]:
    """A standalone ELMo embedding: its own biLM (e.g. ``spacy_elmo.ElmoBiLM.v2``)
    and mix. ``nlp.replace_listeners`` turns an ElmoListener into this.

    grad_factor: as the listener's: the scale of the gradient sent into the
        biLM (0: the biLM is frozen and runs in inference mode).
    """
    return build_mix(BiLMWithGradFactor(bilm, grad_factor), layer_norm, l2, dropout, width)


def BiLMWithGradFactor(
    bilm: Model[List[Doc], List[Floats3d]], grad_factor: float = 0.0
) -> Model[List[Doc], List[Floats3d]]:
    """``bilm`` fine-tuned with its gradient scaled by ``grad_factor``; with 0
    it only predicts (no autograd, no biLM update), also in training."""
    if grad_factor < 0:
        raise ValueError(f"grad_factor must be >= 0, found {grad_factor}")
    return Model(
        "elmo_grad_factor",
        _grad_factor_forward,
        init=_grad_factor_init,
        layers=[bilm],
        attrs={"grad_factor": grad_factor},
    )


def _grad_factor_init(model: Model, X=None, Y=None) -> None:
    model.layers[0].initialize(X=X)


def _grad_factor_forward(model: Model, docs: List[Doc], is_train: bool):
    bilm = model.layers[0]
    factor = model.attrs["grad_factor"]
    if not (is_train and factor > 0):
        return bilm.predict(docs), lambda d_outputs: []
    outputs, backprop = bilm.begin_update(docs)

    def scaled_backprop(d_outputs: List[Floats3d]) -> List:
        return backprop([d * factor for d in d_outputs])

    return outputs, scaled_backprop


def ElmoInputOutput(
    input_elmo: Model[List[Doc], List[Floats2d]],
    encoder: Model[List[Floats2d], List[Floats2d]],
    output_elmo: Model[List[Doc], List[Floats2d]],
) -> Model[List[Doc], List[Floats2d]]:
    """ELMo at the input and at the output of a task encoder (paper, Table 3):
    ``[encoder(ELMo_input); ELMo_output]``, each ELMo with its own mix (two
    listeners of the same elmo component). ``encoder`` works on lists of
    arrays, e.g. ``spacy.TorchBiLSTMEncoder.v1``; give ``input_elmo`` a
    ``width`` equal to the encoder's."""
    return concatenate(chain(input_elmo, encoder), output_elmo)


def replace_listener_cfg(bilm_cfg: dict, listener_cfg: dict) -> dict:
    """Config of what ``nlp.replace_listeners`` puts in a listener's place."""
    if listener_cfg.get("@architectures") != "spacy_elmo.ElmoListener.v1":
        raise ValueError(
            "nlp.replace_listeners for elmo supports an ElmoListener at the given path; "
            f"found {listener_cfg.get('@architectures')!r}"
        )
    cfg = {"@architectures": "spacy_elmo.ElmoMix.v1", "bilm": dict(bilm_cfg)}
    for key in ("grad_factor", "layer_norm", "l2", "dropout", "width"):
        if key in listener_cfg:
            cfg[key] = listener_cfg[key]
    return cfg


def replace_listener(new_model: Model, listener: ElmoListenerLayer, upstream) -> Model:
    """The biLM copy that replaces a receiver, with the receiver's grad_factor
    (the layers of ``spacy_elmo.ElmoMix.v1``'s biLM)."""
    return BiLMWithGradFactor(new_model, listener.attrs["grad_factor"])
