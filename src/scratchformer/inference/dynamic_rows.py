"""The fewest rows of a compiled decoding step whose number of rows is dynamic.

``torch.compile`` and ``torch.export`` compile one graph for every size of a dimension kept
dynamic, but Dynamo specializes sizes 0 and 1: a step of one row would be a graph of its
own. So continuous batching (:mod:`.continuous`) feeds its compiled steps at least
:data:`LEAST_ROWS` rows (a free row computes for nothing), and an
:class:`~.exported.ExportedLM` serves any number of rows from there.
"""

LEAST_ROWS = 2
"""The fewest rows a compiled step of a dynamic number of rows is fed, or exported for."""
