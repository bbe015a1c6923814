"""The model machinery the methods share: hierarchical fastText (Ray actors, Spark prediction), seq2seq
models (fine-tuning as a Ray task, generation on a Ray Data actor pool), scorers, filters and the two
fine-tune/generate stages, and classifier metrics."""
