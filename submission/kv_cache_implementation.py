# Name / Andrew ID: Test Student / tests
# (the name and Andrew ID the handout is issued to; a student handing these files in puts their own here)
"""``kv-cache-implementation.py`` (the handout's file name) under a name Python can import.

    from submission.kv_cache_implementation import generate, load, compare
    python submission/kv_cache_implementation.py      # the same as python submission/kv-cache-implementation.py

The code, and the starter's TODO lines, live in ``kv-cache-implementation.py``; hand that file in.
"""
import importlib.util
import sys
from pathlib import Path

_PATH = Path(__file__).resolve().with_name("kv-cache-implementation.py")
if str(_PATH.parent.parent) not in sys.path:  # the repository, for `helpers`
    sys.path.insert(0, str(_PATH.parent.parent))
_spec = importlib.util.spec_from_file_location("_kv_cache_implementation", _PATH)
_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_module)
globals().update({name: value for name, value in vars(_module).items() if not name.startswith("__")})

if __name__ == "__main__":
    _module.main()
