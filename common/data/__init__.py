"""Input contracts and data utilities shared by every pipeline: schemas, readers, quarantine rules, the
category taxonomy, title normalisation, exact stratified sampling and the synthetic demo world."""
