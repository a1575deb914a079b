"""Property-based fuzzing of the fusion passes (tests/test_fuzz.py runs it).

* ``builder`` — node containers (main graph, bodies, functions) that track types and shapes;
* ``pieces`` — what a model is stitched from: norm and FC forms, traps, If/Loop/function
  wrappers, each knowing how many fusions it must give (and when something leaks from it);
* ``spec`` — a model as data (``ModelSpec``: opset, dtype, shape, seed, (glue, piece) steps)
  and building it into a ``Case`` (model, expected counts, how to feed it);
* ``strategies`` — hypothesis strategies drawing specs that are always valid models;
* ``properties`` — what must hold of every fused model, and saving/loading regressions.
"""
