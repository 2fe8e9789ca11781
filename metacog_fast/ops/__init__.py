"""The compiled kernels, one folder per op: the implementation behind :mod:`metacog_fast.kernels`.

Private by convention: code outside the package (users, examples, docs) imports the public names
from :mod:`metacog_fast.kernels`; ``metacog_fast.ops.<op>`` is for the package's own internal use
(unchecked fast paths, dispatch tables, size helpers) and for tests against the ``naive.py``
references. Names here may move without notice.

Each ``metacog_fast/ops/<op>/`` holds:

* ``api.py``   the public functions: argument checks, then ONE dispatch table (backend -> module);
  every function takes ``check=False`` for callers that validated their inputs (the fast path);
* ``naive.py`` the readable torch reference every backend is tested against (``tests/ops/<op>/``);
* ``cpu.py`` / ``cuda.py`` / ``triton.py``  the glue to each backend (only those the op has);
* ``sizes.py`` (or the op's size checks) where the op has sizes to infer.

Ops: ``rssm`` (RSSM + MUSE self-assessment / self-regulation), ``scoring`` (M_sa trajectory
scoring, mean pooling), ``encoder`` (the int8 MiniLM's fused steps), ``memory`` (retrieval
score and exact rerank). See docs/kernels.md.
"""
