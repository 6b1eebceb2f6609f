"""``python -m helpers.training [flags]``: see :mod:`helpers.training.cli`."""
import sys

from helpers.training.cli import main

if __name__ == "__main__":
    main(sys.argv[1:])
