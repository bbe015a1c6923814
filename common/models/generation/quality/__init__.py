"""Judging generated text: the similarity scorers (:mod:`.scoring`), the MiniLM sentence encoder
(:mod:`.sentence_encoder`) and the filters that keep or drop a sample (:mod:`.filtering`).
"""
