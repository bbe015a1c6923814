"""The model machinery the methods share, in two halves that never import each other:

* :mod:`common.models.generation`: text generators (the seq2seq kinds, the MiniLM warm start, the causal LM
  with LoRA and label prefixes, a served model), their engines, their fine-tuning and Ray Data generation pools, and
  the similarity scorers that filter what they write;
* :mod:`common.models.classifiers`: hierarchical fastText (Ray tasks, Spark prediction), the text, encoder
  and multi-label classifiers and their metrics.

Both build on the models' typed config (:mod:`common.models.config`: generators, fine-tuning, generation;
:mod:`common.models.classifier_config`: fastText and the encoder classifier), :mod:`common.models.pretrained`
(the offline MiniLM weights) and :mod:`common.models.optim`. The model layer never imports a job's run, the lakehouse
or tracking: the stages that join them are :mod:`common.stages`.
"""
