"""Where users work: training frameworks, pytest, notebooks, multi-process runs.

Each module imports its framework lazily (at call time or in the class body of the
module itself), so importing dtype_doctor never pulls in transformers, lightning or IPython.
"""
