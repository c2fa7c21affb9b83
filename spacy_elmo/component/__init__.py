"""The spaCy ``elmo`` component and what only it uses.

- :mod:`.elmo`: the ``elmo`` factory and component (``load_weights``, the
  one route of weights into it), :func:`~.elmo.add_elmo`;
- :mod:`.doc_data`: ``ElmoData``, what ``Doc._.elmo`` holds;
- :mod:`.listener_host`: the component's listener bookkeeping;
- :mod:`.vector_hooks`: ``token/span/doc.vector`` and ``.similarity`` from
  ``Doc._.elmo``;
- :mod:`.saved_pipeline`: reading a saved component's files, bounded;
- :mod:`.registrations`: every name registered with spaCy (the entry points
  in ``pyproject.toml`` name it);
- :mod:`.training_log`: the ``spacy_elmo.JsonlLogger.v1`` training logger.

Nothing is imported here: spaCy finds each name through the entry points,
and ``spacy_elmo``'s own names load their module on first use.
"""
