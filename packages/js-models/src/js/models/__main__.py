"""``python -m js.models``: the command line (``_cli.py``)."""

from ._cli import main

if __name__ == "__main__":
    raise SystemExit(main())
