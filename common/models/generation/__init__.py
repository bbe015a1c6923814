"""Text generators: model kinds (:mod:`.seq2seq`, :mod:`.warm_start`, :mod:`.causal_lm`, :mod:`.label_prefix`),
their engines (:mod:`.hf_engine`, :mod:`.ct2`) and actor pools (:mod:`.pool`), the Spark -> Ray -> Delta
fine-tune and generate stages (:mod:`.stages`), and the scorers and filters of generated text
(:mod:`.scoring`, :mod:`.sentence_encoder`, :mod:`.filtering`)."""
