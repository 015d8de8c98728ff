"""The differential suite: Huawei's Volcano plugin (ascend-for-volcano v26.1.0 in the real
Volcano v1.12.0) beside our engine, case by case.

- ``cases``: a case (one product's servers with their free and unhealthy chips, one job) and
  the seeded generator;
- ``samples``: Huawei's own job samples as cases;
- ``objects``: a case's nodes, DeviceInfo, PodGroup and pods as their owners write them;
- ``huawei``: the cases run through Huawei's plugin in the real Volcano on the test bed's API
  server, or through our own side in that Volcano; ``outcome``: what each did;
- ``faults``: a chip fault under a running job, and which pods each side deletes;
- ``ours``: our decision for a case, and the comparison (ties as upstream draws them count as
  agreement, nothing else does);
- ``known``: the disagreements known today, each with its smallest case;
- ``run``: all of it in one call (``run_cases``), and the summary table.

``python -m benchmarks.differential --seed N --cases M`` runs it from a shell;
``tests/real/test_differential.py`` runs a few hundred cases in ``make test``.
"""
