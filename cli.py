"""Run nmt from a checkout without installing it: ``python cli.py train ...``."""
from nmt.__main__ import main

if __name__ == "__main__":
    main()
