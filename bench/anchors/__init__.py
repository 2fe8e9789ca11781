"""Benchmark anchors: code kept only to be measured against (never used by the package).

* ``dreamerv3_reference``    ReferenceDreamer, a plain re-implementation of one update of the reference
  PyTorch DreamerV3: the anchor of bench/bench_dreamer_train.py (and tests/test_dreamer_train_speed.py).
* ``muse_select_unbatched``  MUSE's step with one mapping call per rollout: the anchor of
  bench/bench_alfworld_agents.py (and tests/test_alfworld_muse_speed_equivalence.py).

Import as ``bench.anchors.<name>`` with the repository root on ``sys.path`` (tests/conftest.py and
the benchmarks that use an anchor put it there). See README.md beside this file.
"""
