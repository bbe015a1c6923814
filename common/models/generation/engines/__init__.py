"""How a generator decodes: transformers (:mod:`.hf_engine`) with row-keyed sampling
(:mod:`.row_sampling`), CTranslate2 (:mod:`.ct2`) with its conversion (:mod:`.ct2_conversion`) and tokenizer
(:mod:`.fast_tokenizer`).
"""
