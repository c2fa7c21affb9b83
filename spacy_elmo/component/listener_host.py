"""The ``elmo`` component's listeners: which downstream layers get its
output (``listener_map``, the structure spaCy's ``replace_listeners`` and
training loop read), and their dims set from the component's biLM."""
from typing import Dict, List

from thinc.api import Model

from ..layers.bilm_shim import get_bilm, has_bilm
from ..layers.listener import ElmoListenerLayer


class ListenerHost:
    """Listener bookkeeping for :class:`~spacy_elmo.component.elmo.Elmo` (a mixin:
    the component sets ``listener_map`` to ``{}`` and has ``name`` and
    ``model``)."""

    name: str
    model: Model
    listener_map: Dict[str, List[ElmoListenerLayer]]

    @property
    def listeners(self) -> List[ElmoListenerLayer]:
        return [m for c in self.listening_components for m in self.listener_map[c]]

    @property
    def listening_components(self) -> List[str]:
        return list(self.listener_map.keys())

    def add_listener(self, listener: ElmoListenerLayer, component_name: str) -> None:
        self.listener_map.setdefault(component_name, [])
        if listener not in self.listener_map[component_name]:
            self.listener_map[component_name].append(listener)
        if has_bilm(self.model):
            self._set_listener_dims(listener)

    def remove_listener(self, listener: ElmoListenerLayer, component_name: str) -> bool:
        if listener in self.listener_map.get(component_name, []):
            self.listener_map[component_name].remove(listener)
            if not self.listener_map[component_name]:
                del self.listener_map[component_name]
            return True
        return False

    def find_listeners(self, component) -> None:
        names = ("*", self.name)
        if isinstance(getattr(component, "model", None), Model):
            for node in component.model.walk():
                if isinstance(node, ElmoListenerLayer) and node.upstream_name in names:
                    self.add_listener(node, component.name)

    def _set_listener_dims(self, listener: ElmoListenerLayer) -> None:
        bilm = get_bilm(self.model)
        for dim, value in (("nL", bilm.num_layers), ("nO", bilm.output_dim)):
            if listener.has_dim(dim) and listener.get_dim(dim) != value:
                raise ValueError(
                    f"an ELMo listener expects {dim}={listener.get_dim(dim)} but the elmo "
                    f"component's biLM has {value}"
                )
            listener.set_dim(dim, value)

    def _relink_listener_dims(self) -> None:
        """After a load: every listener's dims from the biLM read."""
        if has_bilm(self.model):
            for listener in self.listeners:
                self._set_listener_dims(listener)
