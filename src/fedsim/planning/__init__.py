"""The workflow's planning: what Snakemake imports at parse time, at every snakemake call.

The config's data kinds (`kinds`), the config's checks (`configcheck`), the runs table
(`experiments`), each job's arguments and code (`jobs`), the cost estimate and what a training job
asks the scheduler for (`cost`), a run's progress lines (`progress`), the scheduler patch
(`rescheduling`) and the report's words about the run (`captions`). None of it imports torch, not
even inside a function, and no training code imports it: editing the planning reruns no run
(tests/test_layers.py pins both).
"""
