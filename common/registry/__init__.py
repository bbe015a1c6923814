"""What a run ships: a pipeline's final classifiers as registered MLflow models, and the gate that moves the alias.

Above the method packages (it takes the job's context, runs Ray tasks and Spark jobs, copies lakehouse folders):

- :mod:`.config`: the ``registry`` section (which pipelines ship, names, alias, the gate's margin and interval).
- :mod:`.naming`: registered models' names, and the version tags that name a version's pipeline and method.
- :mod:`.gate`: the decision, pure: the two artifacts' predictions on the same test rows, as counts of cells, and
  a paired bootstrap of the metric's difference.
- :mod:`.compare`: scoring the shipped candidate and the champion on those rows (a Ray task, or Spark).
- :mod:`.store`: the MLflow calls (the client, the champion lookup that fails closed, logging a classifier).
- :mod:`.ship`: the step a job runs: log, register, gate, move the alias with a compare-and-set.
"""
