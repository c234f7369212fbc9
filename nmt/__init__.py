"""nmt: neural machine translation: GRU with Bahdanau attention, or Transformer, from the
command line (``nmt``) or from Python (:func:`load`, in :mod:`nmt.api`)."""
__version__ = "0.1.0"

__all__ = ["AttentionMaps", "ExportedModel", "Model", "Sampling", "Translation", "load"]


def __getattr__(name: str) -> object:
    """The API's names, imported on first use: ``import nmt`` alone stays free of torch."""
    if name in __all__:
        from nmt import api
        return getattr(api, name)
    raise AttributeError(f"module 'nmt' has no attribute {name!r}")
