"""The query-reformulation paper's methods (METHODS.md section 2): query normalisation, click-entropy
specificity, PMI similarities, per-product subgraph clustering, reformulation pairs, query augmentation
and the query -> product matcher."""
