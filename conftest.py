"""Shared by tests/ and nbval's notebook items: keep every run away from the committed outputs.

Executing a notebook writes results, figures and report tables; under pytest they go to a temporary
WORKBOOK_OUTPUT_ROOT (kernels inherit the environment), so the committed results/cpu never change in a test.
"""
import os
import tempfile

if "WORKBOOK_OUTPUT_ROOT" not in os.environ:
    os.environ["WORKBOOK_OUTPUT_ROOT"] = tempfile.mkdtemp(prefix="workbook-test-")
os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
