"""Command-line interface: a thin layer over the public API.

Each subcommand lives in its own module of this package and exposes ``register(subparsers)``,
which adds its parser and sets ``func`` (a callable taking the parsed namespace and returning an
exit code). Any :class:`perfmodel.errors.PerfModelError` becomes one line on stderr and exit 2.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from perfmodel import __version__
from perfmodel.errors import FlagError, PerfModelError

SUBCOMMANDS = (
    "topo",
    "hw",
    "comm",
    "model",
    "predict",
    "calibrate",
    "validate",
    "compare",
    "sweep",
)


def error_exit(message: object) -> int:
    """Print ``perfmodel: error: MESSAGE`` on stderr, the CLI's one line for bad input or a
    command that found nothing to show, and return exit status 2."""
    print(f"perfmodel: error: {message}", file=sys.stderr)
    return 2


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The ``perfmodel`` parser with every subcommand, or with subcommand ``only`` alone (its
    module and what it imports are all a run of that command loads: issue 14, cold start)."""
    parser = argparse.ArgumentParser(
        prog="perfmodel",
        description="Predict deep-learning training speed on multi-GPU hardware.",
    )
    parser.add_argument("--version", action="version", version=f"perfmodel {__version__}")
    parser.add_argument(
        "--quiet", action="store_true", help="no progress line on stderr (also: COMMAND --quiet)"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMANDS if only is None else (only,):
        try:
            module = importlib.import_module(f"perfmodel.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"perfmodel.cli.{name}":
                continue  # subcommand not built yet
            raise
        module.register(sub)
    return parser


def _command_of(argv: Sequence[str]) -> str | None:
    """The subcommand named on the command line (the first word that is not an option; the
    top-level options take no value), or ``None``: then every subcommand is registered, for
    the full help and argparse's own message on an unknown command. ``-h``/``--help`` before
    the command asks for the full help (``perfmodel -h comm`` lists every command)."""
    for item in argv:
        text = str(item)
        if text in ("-h", "--help"):
            return None
        if not text.startswith("-"):
            return text if text in SUBCOMMANDS else None
    return None


#: Exit status of a command whose reader closed standard output: 128 + SIGPIPE (13), the
#: status a shell reports for a process that SIGPIPE ended (POSIX ``sh``: "Exit Status";
#: bash's manual, "Exit Status": 128+n for fatal signal n), as ``yes | head -1`` gives; exit 1
#: means a bug (docs/cli.md).
EXIT_BROKEN_PIPE = 128 + 13


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command ``argv`` (``None``: this process's command line) and return its exit
    code; the calling process goes on as before (see :func:`program` for the executable)."""
    return _run(argv, exiting=False)


def program() -> int:
    """The ``perfmodel`` executable (console script and ``python -m perfmodel``): run this
    process's command line; the process exits next.

    So the objects left are frozen (:func:`gc.freeze`) before the interpreter's shutdown, whose
    collections would otherwise traverse them all again: 0.13-0.15 s CPU after the GPT-3 175B
    prediction, 0.01 s frozen (the memory goes back to the system with the process either way;
    ``atexit`` handlers and stream flushes run as before). They are frozen inside
    :func:`perfmodel._gc.fewer_collections`: frozen after it, the young collection that its
    restored threshold starts at once cascaded to a full one over the cluster's graph (0.05 s CPU
    at 16,384 GPUs). :func:`main` does not freeze: an in-process caller's objects stay
    collectable.

    A reader that closes the pipe early (``perfmodel hw gpus | head -1``) ends the command
    quietly, without a ``BrokenPipeError`` traceback, with :data:`EXIT_BROKEN_PIPE`: standard
    output is redirected to ``os.devnull`` so the interpreter's final flush does not fail
    again (the Python documentation's note on SIGPIPE, ``signal`` module)."""
    try:
        return _run(None, exiting=True)
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


def _run(argv: Sequence[str] | None, *, exiting: bool) -> int:
    from perfmodel._gc import CLI_YOUNG_THRESHOLD, YOUNG_THRESHOLD, fewer_collections

    # the imports and the command (perfmodel._gc); the executable's process ends after it
    with fewer_collections(CLI_YOUNG_THRESHOLD if exiting else YOUNG_THRESHOLD):
        rc = _main(argv)
        if exiting:
            import gc

            # before the threshold is restored: the collection it starts has nothing to walk
            gc.freeze()
    return rc


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser(_command_of(sys.argv[1:] if argv is None else argv))
    try:
        for item in sys.argv[1:] if argv is None else argv:
            flag, sep, value = str(item).partition("=")
            if sep and flag.startswith("--") and value == "--":  # argparse would pass []
                raise FlagError(f"{flag} '--': expected a value", value=value, where=flag)
        args = parser.parse_args(argv)
    except PerfModelError as exc:  # a typed flag value (perfmodel.cli._types): one line, exit 2
        return error_exit(exc)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    from perfmodel.cli._progress import progress_line

    fidelity = getattr(args, "fidelity", None) if args.command == "predict" else None
    label = f"perfmodel {args.command}" + (f" ({fidelity})" if fidelity else "") + ": working"
    # sweep prints its own progress (sweep --quiet)
    show = not getattr(args, "quiet", False) and args.command != "sweep"
    try:
        with progress_line(label, sys.stderr, enabled=show) as status:
            args.progress = status.set  # a command may say what it is doing (compare's stages)
            return int(args.func(args) or 0)
    except PerfModelError as exc:
        return error_exit(exc)
    except OSError as exc:  # a path the loaders did not check: still bad input, not a crash
        if isinstance(exc, BrokenPipeError) or exc.filename is None:
            raise  # a closed pipe: program() ends quietly
        from perfmodel._io import os_error_message

        return error_exit(f"{exc.filename}: {os_error_message(exc)}")
    except KeyboardInterrupt:  # pragma: no cover
        print("perfmodel: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(program())
