"""`python -m api` runs the `tessera` command."""

from api.cli import main

if __name__ == "__main__":
    main()
