"""Text generators: model kinds (:mod:`.seq2seq`, :mod:`.warm_start`, :mod:`.causal_lm`, :mod:`.smollm2`,
:mod:`.label_prefix`), their fine-tune (:mod:`.fine_tune_specs`, :mod:`.causal_training`, :mod:`.fine_tune_ray`),
their engines (:mod:`.hf_engine`, :mod:`.ct2`, :mod:`.ct2_conversion`) and actor pools (:mod:`.pool`), the Spark ->
Ray -> Delta fine-tune and generate stages (:mod:`.stages`), and the scorers and filters of generated text
(:mod:`.scoring`, :mod:`.sentence_encoder`, :mod:`.filtering`)."""
