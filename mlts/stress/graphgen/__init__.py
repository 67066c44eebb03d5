"""Random valid NNAPI graphs for the random-graph stress test (mlts.stress.random_graphs).

`generator.GraphGenerator` grows a graph one operation at a time from the per-operation appliers of
`elementwise`, `spatial`, `shape_ops` and `comparisons_and_casts`, all built on `growing` (the graph
being grown, its tensors and what the generator knows of their values).
"""
