"""Title text: the normalisation every classifier trains and predicts on.

Its one definition lives in :mod:`common.pyfunc.text`, the code a registered model carries: a model
served outside the suite normalises exactly as the suite trained it."""

from common.pyfunc.text import normalize_title

__all__ = ["normalize_title"]
