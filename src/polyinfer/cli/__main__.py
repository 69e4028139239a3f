"""`python -m polyinfer.cli`: the same entry point as the `polyinfer` script."""

from polyinfer.cli import main

if __name__ == "__main__":
    main()
