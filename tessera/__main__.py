"""`python -m tessera` runs the `tessera` command."""

from tessera.cli import main

if __name__ == "__main__":
    main()
