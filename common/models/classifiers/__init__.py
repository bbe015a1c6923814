"""Classifiers: hierarchical fastText (:mod:`.hft`), the text classifier facade (:mod:`.text_classifier`), the
encoder classifier with an MLM head (:mod:`.encoder_classifier`), the multi-label classifiers
(:mod:`.multilabel`, :mod:`.multilabel_encoder`) and their metrics (:mod:`.metrics`, :mod:`.label_metrics`)."""
