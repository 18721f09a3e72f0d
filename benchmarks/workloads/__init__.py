"""The workloads of ``speed.py``: one module a workload, and the pieces they share."""
