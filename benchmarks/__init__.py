"""dxplain's benchmarks, one subpackage per area; run one with ``python -m benchmarks.<area>.<name>`` from the
repository root. Results go to ``benchmarks/results/<area>/``; ``python -m benchmarks.render --docs`` renders the
docs' tables from them. See ``benchmarks/README.md``."""
