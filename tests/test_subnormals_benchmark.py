"""benchmarks/subnormals.py at tiny sizes (--quick: 5 rounds, one timed run each way), so that a typo in
the benchmark fails here: it prints its header and one line per run with the times, their ratio and
whether the bits are equal."""

import importlib.util
import re
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "subnormals.py"


def test_the_benchmark_times_both_runs_both_ways_and_compares_their_bits(capsys):
    spec = importlib.util.spec_from_file_location("subnormals_benchmark", SCRIPT)
    benchmark = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(benchmark)
    benchmark.main(["--quick"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("CPU: ") and "numba" in lines[0] and "torch" in lines[0]
    rows = [line for line in lines if "bits equal" in line]
    assert [row.split(":")[0] for row in rows] == ["feddane", "lenet5"], lines
    for row in rows:
        assert re.search(r"flushed [\d.]+ s, kept [\d.]+ s, kept/flushed [\d.]+x, bits equal: (yes|NO) \[", row), row
        assert ", 5 rounds" in row
