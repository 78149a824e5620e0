"""Loads a bench/ script as a module for the CPU tests of the benchmarks
(bench/ is not a package; its scripts import each other by name)."""
import importlib.util
import os
import sys

BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench")


def load(name):
    """bench/<name>.py as a module (bench/ on sys.path while it loads, for
    its own imports)."""
    sys.path.insert(0, BENCH)
    try:
        spec = importlib.util.spec_from_file_location(name, os.path.join(BENCH, name + ".py"))
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod
    finally:
        sys.path.remove(BENCH)
