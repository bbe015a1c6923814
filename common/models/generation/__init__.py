"""Text generators, one folder per concept:

* :mod:`.kinds`    what a generator is: the seq2seq kinds and their fine-tune loop, the MiniLM warm start, the causal
  LM with LoRA (SmolLM2), in-context prompting, label prefixes, and their training rows;
* :mod:`.engines`  how it decodes: transformers with row-keyed sampling, CTranslate2 with its conversion and tokenizer;
* :mod:`.served`   a generator behind an OpenAI-compatible API;
* :mod:`.on_ray`   generators on Ray: the Ray Data actor pools, warm tasks, the fine-tune's Ray task;
* :mod:`.quality`  the scorers and filters of generated text.

What all of them agree on stays here: the saved generator's files and the generated rows' schema (:mod:`.formats`) and
what a fine-tune takes and gives (:mod:`.fine_tune_specs`). The Spark -> Ray -> Delta stages that run them for a job
are :mod:`common.stages`.
"""
