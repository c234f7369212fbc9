"""The ``nmt`` command (and ``python -m nmt``): preloads the allocator, then runs the CLI."""
import sys


def main() -> None:
    """Console-script entry point: :func:`nmt.runtime.allocator.run_with_preloaded_allocator`
    first, before anything allocates, then the Typer app."""
    from nmt.errors import NmtError
    from nmt.runtime.allocator import run_with_preloaded_allocator
    try:
        run_with_preloaded_allocator()
    except NmtError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
    from nmt.cli import main as run_cli
    run_cli()


if __name__ == "__main__":
    main()
