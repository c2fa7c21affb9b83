"""ELMo models by name, path or URL -> local files (see :mod:`.resolving`).

The hub knows names, URLs, the cache and the transport; it knows no weight
format and imports nothing of the model: callers hand in the check a
download must pass (:mod:`spacy_elmo.loading` gives the published format's).
One stack, each module importing only those below it:

- :mod:`.resolving`: :func:`locate` (what a user writes as weights, every rule
  about it, no download) and :func:`resolve` (-> files);
- :mod:`.families`: ``efml:``/``nlpl:`` names, zips, other families' directories;
- :mod:`.names`: the shipped model, AllenNLP's published names, URLs and
  the cache;
- :mod:`.transport`: bounded, locked, atomic downloads;
- :mod:`.help`: what the errors tell a user.
"""
from .help import HOW_TO_GIVE_WEIGHTS, PYTHON, Wording
from .names import (
    CACHE_ENV,
    MIRROR_ENV,
    PUBLISHED_BASE_URL,
    PUBLISHED_MODELS,
    PUBLISHED_WEIGHTS_MAX_BYTES,
    SHIPPED_MODEL_DIR,
    SHIPPED_NAMES,
    CacheError,
    ModelNotFoundError,
    base_url,
    cache_dir,
    check_cache,
    download,
    fetch,
    is_url,
    published_cache_paths,
    published_files,
    published_urls,
    shipped_model,
    stale_hint,
    url_cache_path,
)
from .resolving import Located, OptionsNotFoundError, locate, obtain, resolve
from .transport import (
    DEADLINE_ENV,
    DEADLINE_S,
    MAX_DOWNLOAD_BYTES,
    MAX_OPTIONS_BYTES,
    TIMEOUT_S,
    DownloadError,
    deadline_s,
    redact,
)

__all__ = [
    "CACHE_ENV",
    "DEADLINE_ENV",
    "DEADLINE_S",
    "MAX_DOWNLOAD_BYTES",
    "MAX_OPTIONS_BYTES",
    "PUBLISHED_WEIGHTS_MAX_BYTES",
    "CacheError",
    "check_cache",
    "deadline_s",
    "redact",
    "HOW_TO_GIVE_WEIGHTS",
    "PYTHON",
    "Located",
    "OptionsNotFoundError",
    "Wording",
    "locate",
    "obtain",
    "MIRROR_ENV",
    "PUBLISHED_BASE_URL",
    "PUBLISHED_MODELS",
    "SHIPPED_MODEL_DIR",
    "SHIPPED_NAMES",
    "TIMEOUT_S",
    "DownloadError",
    "ModelNotFoundError",
    "base_url",
    "cache_dir",
    "download",
    "fetch",
    "is_url",
    "published_cache_paths",
    "published_files",
    "published_urls",
    "resolve",
    "shipped_model",
    "stale_hint",
    "url_cache_path",
]
