"""The tokenizer of CTranslate2's generation actors: the transformers tokenizer calls they make, answered by the
``tokenizers`` library alone from a model's ``tokenizer.json``."""

from __future__ import annotations

import os
from types import SimpleNamespace
from typing import Optional


class FastTokenizer:
    """The transformers tokenizer calls :class:`common.models.generation.engines.ct2.CT2Generator` makes, answered by
    the ``tokenizers`` library from the model's ``tokenizer.json``: importing transformers (and torch with it) costs an
    actor about 3 s of its start, and CTranslate2 needs neither."""

    def __init__(self, tokenizer, unk_token: Optional[str] = None):
        self._tokenizer = tokenizer
        self._unk_id = tokenizer.token_to_id(unk_token) if unk_token else None

    @classmethod
    def load(cls, folder: str) -> Optional["FastTokenizer"]:
        """The model's fast tokenizer, or None when there is no ``tokenizer.json`` or transformers would
        post-process its decoding (``clean_up_tokenization_spaces``): then transformers must serve it."""
        from tokenizers import Tokenizer

        from common.platform.storage import read_json

        path = os.path.join(folder, "tokenizer.json")
        if not os.path.isfile(path):
            return None
        settings = read_json(os.path.join(folder, "tokenizer_config.json"))
        if settings.get("clean_up_tokenization_spaces"):
            return None
        unk = settings.get("unk_token")
        tokenizer = Tokenizer.from_file(path)
        # A tokenizer saved after a padded, truncated training call keeps those settings in its file;
        # transformers resets them on each call, and so must this (a truncated input would pass the length check).
        tokenizer.no_padding()
        tokenizer.no_truncation()
        return cls(tokenizer, unk.get("content") if isinstance(unk, dict) else unk)

    def __call__(self, text, add_special_tokens: bool = True):
        """``input_ids`` of one text or a list of texts, special tokens (the end token) added unless
        ``add_special_tokens`` is False."""
        if isinstance(text, str):
            return SimpleNamespace(input_ids=self._tokenizer.encode(text, add_special_tokens=add_special_tokens).ids)
        return SimpleNamespace(
            input_ids=[e.ids for e in self._tokenizer.encode_batch(list(text), add_special_tokens=add_special_tokens)]
        )

    def convert_ids_to_tokens(self, ids: list[int]) -> list[str]:
        return [self._tokenizer.id_to_token(i) for i in ids]

    def convert_tokens_to_ids(self, tokens: list[str]) -> list[int]:
        """Ids of ``tokens``; one outside the vocabulary gets the unknown token's id, as in transformers (a
        model whose embedding is wider than its tokenizer, t5-small's 32,128 rows for 32,100 tokens, can
        sample ids that CTranslate2 names by placeholder tokens)."""
        ids = [self._tokenizer.token_to_id(t) for t in tokens]
        return [self._unk_id if i is None else i for i in ids]

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return self._tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)
