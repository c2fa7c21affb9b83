"""The ``elmo`` pipeline component.

``nlp.add_pipe("elmo")`` adds a component that runs the biLM over each Doc
(sentences, or strided windows when the Doc has no sentence boundaries) and
stores the activations on ``Doc._.elmo`` (:class:`~spacy_elmo.component.doc_data.ElmoData`).
Downstream components use ELMo through ``spacy_elmo.ElmoListener.v1``
(see :mod:`spacy_elmo.layers.listener`), each with its own learned mix.

The component drives its thinc model like spacy-transformers' transformer
component: ``predict`` is ``model.predict(docs)``; ``update`` is
``model.begin_update(docs)`` when the biLM is fine-tuned (a listener has
``grad_factor > 0`` and the component is not ``frozen``), ``model.predict``
otherwise, and hands the outputs and a backprop callback to the listeners.

Weights come in one way, :meth:`Elmo.load_weights` (a name, path or URL
given to :func:`spacy_elmo.loading.load_bilm`; none given: the English biLM
shipped with the package), from one of two settings::

    [initialize.components.elmo]
    weights = "small"                   # or "path/weights.hdf5"
    options = null                      # or "path/options.json"

or the component's own ``weights``/``options``
(``nlp.add_pipe("elmo", config={"weights": "small"})``), used when the
``[initialize]`` block gives none, at ``nlp.initialize()`` or on first use
before it. ``add_pipe`` checks them first, without a download
(:func:`spacy_elmo.loading.check_weights`: unknown names and paths that do
not exist stop it). They are saved inside the pipeline afterwards
(``nlp.to_disk`` writes them in the same format), so ``spacy.load`` needs no
outside file and does not check the setting again. In Python,
:func:`add_elmo` adds the component and loads its weights at once.
"""
import math
from itertools import islice
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Union, cast

import numpy
from spacy.language import Language
from spacy.pipeline import TrainablePipe
from spacy.tokens import Doc
from spacy.training import Example, validate_examples, validate_get_examples
from spacy.util import minibatch, raise_error
from spacy.vocab import Vocab
from thinc.api import Config, Model, Optimizer, set_dropout_rate

from ..bilm import BiLM
from ..bilm.fast.token_cache import parameter_stamp
from ..layers.bilm_shim import get_bilm, has_bilm, set_bilm
from ..layers.listener import ElmoListenerLayer
from ..layers.output_cache import OutputCache
from ..layers.span_plan import token_buffers
from ..loading import check_weights, load_bilm
from . import registrations  # noqa: F401 (registers the architectures the default config names)
from .doc_data import DTYPES, STORES, ElmoData, install_extensions
from .listener_host import ListenerHost
from .vector_hooks import install as install_vector_hooks
from .vector_hooks import vector_space

DEFAULT_MODEL_CONFIG = """
[model]
@architectures = "spacy_elmo.ElmoBiLM.v2"
batch_size = 64
precision = "fp32"

[model.span_getter]
@span_getters = "spacy_elmo.sent_or_strided_spans.v1"
window = 128
stride = 96
"""
DEFAULT_MODEL = Config().from_str(DEFAULT_MODEL_CONFIG)["model"]


@Language.factory(
    "elmo",
    assigns=["doc._.elmo"],
    default_config={
        "model": DEFAULT_MODEL,
        "store": "layers",
        "dtype": "float32",
        "mix": None,
        "frozen": False,
        "weights": None,
        "options": None,
        "vector_hooks": True,
        "buffer_tokens": 16384,
    },
    default_score_weights={},
)
def make_elmo(
    nlp: Language,
    name: str,
    model: Model,
    store: str,
    dtype: str,
    mix: Optional[List[float]],
    frozen: bool = False,
    weights: Optional[str] = None,
    options: Optional[str] = None,
    vector_hooks: bool = True,
    buffer_tokens: int = 16384,
) -> "Elmo":
    """ELMo activations on ``Doc._.elmo``.

    store: "layers" (all L+1 layers; listeners need this) or "vectors" (one
        vector per token, the ``mix`` of the layers).
    dtype: "float32" or "float16" storage.
    mix: weights of the layers for ``Doc._.elmo.vectors`` and so for
        ``.vector`` and ``.similarity`` (used as given, one per layer; None:
        the top layer, which reflects context: see
        :data:`~spacy_elmo.component.doc_data.DEFAULT_MIX`).
    frozen: never fine-tune the biLM, whatever the listeners' ``grad_factor``;
        during training the component still broadcasts the layers, so the
        listeners learn their mixes. Not frozen, the biLM is fine-tuned when
        a listener has ``grad_factor > 0``.
    weights, options: the biLM to load at ``nlp.initialize()`` when
        ``[initialize.components.elmo]`` gives none: a model name, path or
        URL (see :mod:`spacy_elmo.hub`); None: the shipped English biLM.
        Checked here without a download (:func:`~spacy_elmo.loading.check_weights`),
        read only at initialization (or first use before it): a saved
        pipeline carries its weights and never reads these again.
    vector_hooks: answer ``token.vector``, ``span.vector``, ``doc.vector``
        and ``.similarity`` from ``Doc._.elmo`` through spaCy's user hooks
        (:mod:`spacy_elmo.component.vector_hooks`). On by default: contextual vectors
        are what the component is for, spaCy users look for them there, and
        the hooks compute nothing until asked. Turn it off to keep the
        vocabulary's static vectors (e.g. ``en_core_web_md``'s) behind
        ``.vector`` and ``.similarity``.
    buffer_tokens: ``nlp.pipe`` runs the biLM over groups of docs of at
        least this many tokens, whatever spaCy's ``batch_size`` (0: spaCy's
        batches as they come); see :meth:`Elmo.pipe`.
    """
    if not _restoring(nlp, name):
        check_weights(weights, options)
    return Elmo(
        nlp.vocab, model, name, store=store, dtype=dtype, mix=mix, frozen=frozen,
        weights=weights, options=options, vector_hooks=vector_hooks, buffer_tokens=buffer_tokens
    )


def _restoring(nlp: Language, name: str) -> bool:
    """Whether spaCy is rebuilding the component ``name`` of a saved pipeline:
    ``spacy.load`` creates the ``Language`` with the pipeline's saved
    ``meta.json``, which lists its components, before it builds them from
    the config. Such a component gets its biLM from the saved files, and
    its ``weights`` setting may name a path of the machine it was trained
    on, so it is not checked. (spaCy keeps the meta it was given in
    ``Language._meta``; its ``meta`` property would overwrite the list
    with the components built so far.)"""
    meta = getattr(nlp, "_meta", None)
    if not isinstance(meta, dict):
        return False
    return any(isinstance(names, list) and name in names for names in (meta.get("components"), meta.get("pipeline")))


class Elmo(ListenerHost, TrainablePipe):
    """Runs the biLM and feeds ``Doc._.elmo`` and the ELMo listeners (their
    bookkeeping: :class:`~spacy_elmo.component.listener_host.ListenerHost`)."""

    def __init__(
        self,
        vocab: Vocab,
        model: Model,
        name: str = "elmo",
        *,
        store: str = "layers",
        dtype: str = "float32",
        mix: Optional[Sequence[float]] = None,
        frozen: bool = False,
        weights: Optional[Union[str, Path]] = None,
        options: Optional[Union[str, Path]] = None,
        vector_hooks: bool = True,
        buffer_tokens: int = 16384,
    ) -> None:
        if isinstance(buffer_tokens, bool) or not isinstance(buffer_tokens, int) or buffer_tokens < 0:
            raise ValueError(
                f"the elmo component's buffer_tokens must be an integer >= 0 (0: off), found {buffer_tokens!r}"
            )
        if store not in STORES:
            raise ValueError(f"store must be one of {STORES}, found {store!r}")
        if dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {DTYPES}, found {dtype!r}")
        check_mix(mix)
        self.vocab = vocab
        self.model = model
        self.name = name
        self.cfg: Dict[str, Any] = {"store": store, "dtype": dtype, "mix": None if mix is None else list(mix)}
        #: No biLM gradients in ``update`` (the listeners still get the layers).
        self.frozen = frozen
        self.listener_map = {}
        #: The factory's ``weights``/``options``: read at initialization when
        #: ``[initialize.components.elmo]`` gives none (checked by the factory).
        self.weights_source = (weights, options)
        #: Install :mod:`spacy_elmo.component.vector_hooks` on every annotated Doc.
        self.vector_hooks = vector_hooks
        #: Tokens per group of docs in :meth:`pipe` (0: spaCy's batches).
        self.buffer_tokens = buffer_tokens
        #: Training only (``spacy_elmo.training_cache.v1``; never saved): read while the biLM is not fine-tuned.
        self.output_cache: Optional[OutputCache] = None
        install_extensions()

    # ------------------------------------------------------------- the biLM
    @property
    def bilm(self) -> BiLM:
        """The PyTorch biLM (raises a clear error before initialization)."""
        return get_bilm(self.model)

    def set_bilm(self, bilm: BiLM) -> None:
        """Use ``bilm`` (a :class:`~spacy_elmo.BiLM`) as this component's model."""
        check_mix(self.cfg["mix"], bilm.num_layers)
        set_bilm(self.model, bilm)
        for listener in self.listeners:
            self._set_listener_dims(listener)

    def load_weights(
        self, weights: Optional[Union[str, Path]] = None, options: Optional[Union[str, Path]] = None
    ) -> None:
        """The one route of weights into the component: ``[initialize.components.elmo]``,
        the factory's ``weights``, first use before ``nlp.initialize()`` and
        :func:`add_elmo` all call it. ``weights`` (and ``options``): a name,
        path or URL, checked and read once by :func:`spacy_elmo.loading.load_bilm`
        (the rules about the pair live in :func:`spacy_elmo.hub.locate`).
        Neither given: the factory's ``weights``/``options`` (None there: the
        shipped English biLM). A ready :class:`~spacy_elmo.BiLM` is not
        weights: :meth:`set_bilm` takes it."""
        if weights is None and options is None:
            weights, options = self.weights_source
        self.set_bilm(load_bilm(weights, options))

    def _load_configured_bilm(self) -> None:
        """First use before ``nlp.initialize()``: load the factory's
        ``weights`` (None: the shipped English biLM)."""
        if not has_bilm(self.model):
            self.load_weights()
            self.model.initialize()

    # ----------------------------------------------------------- inference
    def predict(self, docs: Iterable[Doc]) -> List[numpy.ndarray]:
        docs = list(docs)
        if not docs:
            return []
        self._load_configured_bilm()
        return self._predict_layers(docs)

    def pipe(self, stream: Iterable[Doc], *, batch_size: int = 128) -> Iterator[Doc]:
        """Annotate a stream of docs, yielded in order. The biLM runs over
        groups of at least ``buffer_tokens`` tokens (:func:`~spacy_elmo.layers.
        span_plan.token_buffers`; 0: spaCy's batches), their sentences sorted by
        length together; the groups depend only on the stream, so outputs do
        not depend on ``batch_size``. Memory: a group's docs and layers,
        ``buffer_tokens`` (+ its last doc) x (L+1) x dim x 4 bytes (at the
        default 16,384: 48 MiB for the shipped biLM, 192 MiB for AllenNLP's
        original), plus one biLM batch. The default is the smallest of a
        sweep that keeps the component within a few per cent of the biLM's
        one-call speed (docs/speed.md).

        With an error handler (``nlp.set_error_handler``), a group that fails
        is run again one doc at a time: the handler gets only the docs that
        fail alone, and every other doc of the group comes out annotated (its
        layers then agree with a group's to float32 rounding, as with
        ``buffer_tokens = 0``). Without one, the error is raised at once."""
        error_handler = self.get_error_handler()
        groups = token_buffers(stream, self.buffer_tokens) if self.buffer_tokens else minibatch(stream, size=batch_size)
        for docs in groups:
            try:
                self.set_annotations(docs, self.predict(docs))
            except Exception as e:
                if error_handler is raise_error or len(docs) == 1:
                    error_handler(self.name, self, docs, e)
                else:
                    yield from self._pipe_one_by_one(docs, error_handler)
                continue
            yield from docs

    def _pipe_one_by_one(self, docs: List[Doc], error_handler: Callable) -> Iterator[Doc]:
        for doc in docs:
            try:
                self.set_annotations([doc], self.predict([doc]))
            except Exception as e:
                error_handler(self.name, self, [doc], e)
                continue
            yield doc

    def _predict_layers(self, docs: List[Doc]) -> List[numpy.ndarray]:
        cache = None if self.fine_tunes else self.output_cache
        layers = self.model.predict(docs) if cache is None else cache.predict(self.model, docs)
        return cast(List[numpy.ndarray], layers)  # thinc's Floats3d: numpy (or cupy) arrays

    def set_annotations(self, docs: Sequence[Doc], layers: List[numpy.ndarray]) -> None:
        store, dtype, mix = self.cfg["store"], self.cfg["dtype"], self.cfg["mix"]
        space = self._vector_space()
        for doc, doc_layers in zip(docs, layers):
            doc._.elmo = ElmoData.from_layers(self.model.ops.to_numpy(doc_layers), store, dtype, mix, space=space)
            if self.vector_hooks:
                install_vector_hooks(doc)

    def _vector_space(self) -> Optional[str]:
        """``ElmoData.space`` of the Docs this component annotates now: the
        digest of its biLM and ``mix``, kept until a parameter changes."""
        if not has_bilm(self.model):
            return None
        bilm, mix = self.bilm, self.cfg["mix"]
        key = (id(bilm), parameter_stamp([bilm]), None if mix is None else tuple(mix))
        if getattr(self, "_space_key", None) != key:
            self._space_key, self._space = key, vector_space(bilm, mix)
        return self._space

    # ------------------------------------------------------------- training
    def update(
        self,
        examples: Iterable[Example],
        *,
        drop: float = 0.0,
        sgd: Optional[Optimizer] = None,
        losses: Optional[Dict[str, float]] = None,
    ) -> Dict[str, float]:
        """Run the biLM on the batch and broadcast its output to the listeners.

        Fine-tuning (:attr:`fine_tunes`): ``model.begin_update``, and the
        last listener's backprop sends the summed, ``grad_factor``-scaled
        gradients of all listeners into the biLM. Otherwise ``model.predict``
        (no autograd), and the listeners' gradients stop here."""
        if losses is None:
            losses = {}
        losses.setdefault(self.name, 0.0)
        examples = list(examples)
        validate_examples(examples, "Elmo.update")
        docs = [eg.predicted for eg in examples]
        if not docs:
            return losses
        self._load_configured_bilm()
        set_dropout_rate(self.model, drop)
        if self.fine_tunes:
            outputs, bp_outputs = self.model.begin_update(docs)
        else:
            outputs, bp_outputs = self._predict_layers(docs), None
        d_outputs: List[Optional[numpy.ndarray]] = [None] * len(outputs)

        def accumulate_gradient(grads):
            # A listener with grad_factor 0 sends None. Returns the (empty)
            # gradient w.r.t. the Docs, like any layer. The reported loss is
            # the squared norm of the gradients into the biLM, as spaCy's
            # tok2vec reports it.
            if grads is not None:
                for i, grad in enumerate(grads):
                    d_outputs[i] = grad if d_outputs[i] is None else d_outputs[i] + grad
                    losses[self.name] += float((grad**2).sum())
            return []

        def backprop(grads):
            accumulate_gradient(grads)
            if bp_outputs is not None and any(d is not None for d in d_outputs):
                filled = [self.model.ops.alloc3f(*o.shape) if d is None else d for d, o in zip(d_outputs, outputs)]
                bp_outputs(filled)
                if sgd is not None:
                    self.finish_update(sgd)
            return []

        batch_id = ElmoListenerLayer.get_batch_id(docs)
        listeners = self.listeners
        for listener in listeners[:-1]:
            listener.receive(batch_id, outputs, accumulate_gradient)
        if listeners:
            listeners[-1].receive(batch_id, outputs, backprop)
        return losses

    @property
    def is_trainable(self) -> bool:
        """Whether training changes this component: only when it fine-tunes
        the biLM (:attr:`fine_tunes`). A frozen biLM has nothing to update,
        so spaCy's training table shows no always-zero ``elmo`` loss column
        for it; ``nlp.update`` still calls :meth:`update`, which broadcasts
        the layers to the listeners."""
        return self.fine_tunes

    @property
    def fine_tunes(self) -> bool:
        """Whether ``update`` fine-tunes the biLM: not :attr:`frozen`, and a
        listener has ``grad_factor > 0``."""
        return not self.frozen and any(listener.attrs["grad_factor"] > 0 for listener in self.listeners)

    def finish_update(self, sgd: Optimizer) -> None:
        if not self.frozen:
            self.model.finish_update(sgd)

    def get_loss(self, examples, scores) -> None:
        return None

    def initialize(
        self,
        get_examples: Callable[[], Iterable[Example]],
        *,
        nlp: Optional[Language] = None,
        weights: Optional[Union[str, Path]] = None,
        options: Optional[Union[str, Path]] = None,
    ) -> None:
        """Load the biLM from ``weights``/``options`` (``[initialize.components.elmo]``):
        a name, path or URL (see :mod:`spacy_elmo.hub`), through
        :meth:`load_weights`. None given: the factory's ``weights``/``options``;
        else the biLM the component already has (set with :meth:`set_bilm`);
        else the shipped English biLM."""
        validate_get_examples(get_examples, "Elmo.initialize")
        given = weights is not None or options is not None
        if given or self.weights_source != (None, None) or not has_bilm(self.model):
            self.load_weights(weights, options)
        else:
            self.set_bilm(get_bilm(self.model))
        doc_sample = [eg.reference for eg in islice(get_examples(), 10)]
        self.model.initialize(X=doc_sample)

    def add_label(self, label: str) -> int:
        raise NotImplementedError

    # ------------------------------------------------------- serialization
    def from_disk(self, path, *, exclude=tuple()):
        """Reads ``cfg`` and ``model`` through :mod:`spacy_elmo.component.saved_pipeline`:
        size-bounded, checked, and every failure a clear error naming the file."""
        from .saved_pipeline import read_component

        self._validate_serialization_attrs()
        read_component(self, Path(path), exclude)
        self._check_saved_mix(f"{Path(path) / 'cfg'}")
        self._relink_listener_dims()
        return self

    def from_bytes(self, bytes_data, *, exclude=tuple()):
        """``nlp.from_bytes``: the same checks as :meth:`from_disk`, naming
        ``the elmo component's bytes``."""
        from .saved_pipeline import read_component_bytes

        self._validate_serialization_attrs()
        read_component_bytes(self, bytes_data, exclude)
        self._check_saved_mix(f"the {self.name} component's bytes (cfg)")
        self._relink_listener_dims()
        return self

    def _check_saved_mix(self, where: str) -> None:
        if has_bilm(self.model):
            try:
                check_mix(self.cfg["mix"], self.bilm.num_layers)
            except ValueError as err:
                raise ValueError(f"{where}: {err}") from None


#: The most layer weights ``mix`` may give (the largest biLM has far fewer layers).
MAX_MIX_LENGTH = 64


def check_mix(mix: Optional[Sequence[float]], n_layers: Optional[int] = None) -> None:
    """``mix`` must be None or one finite number per layer of the biLM
    (``n_layers``, when the biLM is known: at initialization, with
    :func:`add_elmo`, at first use or when a saved pipeline is read)."""
    setting = "the elmo component's mix ([components.elmo] mix)"
    if mix is None:
        return
    ok = (
        isinstance(mix, (list, tuple))
        and 0 < len(mix) <= MAX_MIX_LENGTH
        and all(isinstance(w, (int, float)) and not isinstance(w, bool) and math.isfinite(w) for w in mix)
    )
    if not ok:
        shown = repr(mix) if len(repr(mix)) <= 200 else repr(mix)[:200] + "..."
        raise ValueError(
            f"{setting} must be null (the top layer) or a list of one finite number per layer of the biLM, "
            f"found {shown}"
        )
    if n_layers is not None and len(mix) != n_layers:
        example = [0] * (n_layers - 1) + [1]
        raise ValueError(
            f"{setting} gives {len(mix)} weights, but the biLM has {n_layers} layers (0..{n_layers - 1}): give "
            f"one weight per layer, e.g. {example} for the top layer, or null"
        )


def add_elmo(
    nlp: Language,
    weights: Optional[Union[str, Path]] = None,
    options: Optional[Union[str, Path]] = None,
    *,
    bilm: Optional[BiLM] = None,
    name: str = "elmo",
    config: Optional[Dict] = None,
    **add_pipe_kwargs,
) -> Elmo:
    """The notebook route: add an ``elmo`` component and give it weights.

    >>> nlp = spacy.blank("en")
    >>> add_elmo(nlp, "weights.hdf5", "options.json")
    >>> nlp("ELMo reads words in context.")._.elmo.vectors.shape
    (6, 1024)

    Either ``weights`` (a name, path or URL, with ``options`` where needed;
    see :mod:`spacy_elmo.hub`; None: the shipped English biLM), which become
    the component's ``weights``/``options`` settings and are loaded through
    :meth:`Elmo.load_weights`, or a ready ``bilm`` (:meth:`Elmo.set_bilm`).
    ``weights``/``options`` may also be given in ``config`` (the factory's
    settings); given in both places, they are refused rather than one
    silently winning. On failure ``nlp`` is left as it was.
    """
    config = dict(config or {})
    in_config = [key for key in ("weights", "options") if config.get(key) is not None]
    given = [key for key, value in (("weights", weights), ("options", options)) if value is not None]
    places = [f"as {what}" for what, keys in (("arguments", given), ("in config", in_config)) if keys]
    places += ["as a bilm"] if bilm is not None else []
    if len(places) > 1:
        raise ValueError(
            f"add_elmo got the biLM twice: {' and '.join(places)}; give either weights (and options) or a bilm, "
            "in one place"
        )
    if given:
        config.update(
            weights=None if weights is None else str(weights), options=None if options is None else str(options)
        )
    component = cast(Elmo, nlp.add_pipe("elmo", name=name, config=config, **add_pipe_kwargs))
    try:
        if bilm is not None:
            component.set_bilm(bilm)
        else:
            component.load_weights()
        component.model.initialize()
    except BaseException:
        nlp.remove_pipe(name)
        raise
    return component
