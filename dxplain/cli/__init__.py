"""The ``dxplain`` command: argument parsing and printing only; defaults come from the flows.

Each command lives in a module of this package with a ``register(subparsers)`` function; a new model
family adds its module to ``COMMANDS`` (docs/architecture.md, "How to add a model family").
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import signal
import sys
import threading

from .. import progress
from ..errors import NO_ANSWER, DxplainError, store_unreachable

COMMANDS = (
    "refresh",
    "explain",
    "data",
    "negatives",
    "prototypes",
    "evaluate",
    "gammli",
    "kolmogorov",
    "pairwise",
    "report",
    "serving",
    "serve",
    "diff",
    "forget",
)
# Commands registered by a module of another name; every other command is its module's name.
MODULE_OF = {
    "datasets": "data",
    "train": "data",
    "import-embeddings": "data",
    "predict": "serving",
    "recommend": "serving",
}


def parser(only: str | None = None) -> argparse.ArgumentParser:
    """The argument parser; ``only``: register just that module's commands (a command's options are built
    from its flow's signature, so importing every flow, and Prefect with it, costs seconds a quick
    command like ``explain`` or ``datasets`` should not pay)."""
    p = argparse.ArgumentParser(
        prog="dxplain",
        description="Explain recommendations in terms of the training "
        "data behind them. `dxplain COMMAND --help` lists a command's options.",
    )
    _volume_options(p, default=False)
    sub = p.add_subparsers(dest="command", required=True)
    for name in (only,) if only else COMMANDS:
        importlib.import_module(f"{__name__}.{name}").register(sub)
    _give_every_command(p)
    return p


def _volume_options(p: argparse.ArgumentParser, default) -> None:
    volume = p.add_mutually_exclusive_group()
    volume.add_argument(
        "-v", "--verbose", action="store_true", default=default, help="every step in the log (debug level)"
    )
    volume.add_argument(
        "-q", "--quiet", action="store_true", default=default, help="warnings and errors only, no progress line"
    )
    p.add_argument("--debug", action="store_true", default=default, help="show the traceback of an error")


def _give_every_command(p: argparse.ArgumentParser) -> None:
    """-v, -q and --debug after the command too (``dxplain refresh … -q``), at every level of subcommands;
    there they default to SUPPRESS, so the value given before the command stands unless repeated after."""
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command in action.choices.values():
                _volume_options(command, default=argparse.SUPPRESS)
                _give_every_command(command)


def _stdout_is_broken() -> bool:
    """Whether stdout is a pipe whose reader has gone (poll reports an error on it: a failed write may have emptied
    the buffer, so a flush would not say)."""
    import select

    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # no file behind it (a StringIO), or closed
        return False
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(events & select.POLLERR for _, events in poller.poll(0))


def main(argv: list[str] | None = None) -> int:
    # Cluster chatter at INFO hides dxplain's progress lines; dask reads this before distributed loads.
    os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "warning")
    # Prefect's ephemeral server otherwise sends a telemetry heartbeat that, offline or when it races the
    # flow for the local SQLite file, prints a traceback ("database is locked") in the middle of a good run.
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    # Prefect's own telemetry, off by default here as well (set DO_NOT_TRACK=0 to send it).
    os.environ.setdefault("DO_NOT_TRACK", "1")
    # The ephemeral server's 20 s start-up limit failed a first run on a busy 2-core machine: give it 120 s.
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
    argv = sys.argv[1:] if argv is None else argv
    verb = next((x for x in argv if not x.startswith("-")), None)  # the global options take no values
    module = MODULE_OF.get(verb, verb)
    p = parser(module if module in COMMANDS else None)
    a = p.parse_args(argv)
    if a.quiet and a.verbose:  # given on two levels, which argparse's exclusive group cannot see
        p.error("argument -q/--quiet: not allowed with argument -v/--verbose")
    set_volume(a.quiet, a.verbose)
    in_main = threading.current_thread() is threading.main_thread()  # signal handlers live there only
    previous = signal.signal(signal.SIGINT, _interrupt) if in_main else None
    line = progress.TerminalLine() if sys.stderr.isatty() and not a.quiet else None
    reporter = progress.use(line)
    try:
        code = a.func(a)
        sys.stdout.flush()  # a reader that left shows here, in the handler below, not at the interpreter's exit
        return code
    except KeyboardInterrupt:
        _stop_children_and_exit()
    except BrokenPipeError:
        if not _stdout_is_broken():
            raise  # a socket or a worker's pipe, not the reader of stdout
        # The reader of stdout left (`dxplain diff | head`): no traceback, and the interpreter's last flush of stdout
        # goes to /dev/null instead of raising again (Python's signal docs, "Note on SIGPIPE").
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, as a shell reports a command a closed pipe ended
    except DxplainError as exc:
        if a.debug:
            raise
        print(f"dxplain: error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        if a.debug or (why := store_unreachable(exc)) is None:
            raise
        # Published folders and LATEST move last, so a run stopped here left nothing half-visible.
        print(
            f"dxplain: error: {why}; nothing was published; run the same command again once it answers", file=sys.stderr
        )
        return 1
    finally:
        if line is not None:
            line.close()
        progress.use(reporter)
        if in_main:
            signal.signal(signal.SIGINT, previous)


def _error_names(cls=DxplainError) -> tuple[str, ...]:
    return (cls.__name__,) + tuple(n for sub in cls.__subclasses__() for n in _error_names(sub))


class _Chatter(logging.Filter):
    """Prefect's per-task "Finished in state Completed()" and the link to an ephemeral UI that is gone
    when the command ends: about half of a refresh's log at the default level, and no news. Also Prefect's
    tracebacks and failed states for a dxplain error (bad input, say): ``main`` prints it as one named
    line, and two tracebacks of it above that line bury it (``-v`` shows them). Likewise the ERROR lines
    that report Ctrl-C as a crash of the running task and flow, after ``_interrupt`` has said what happens."""

    def filter(self, record: logging.LogRecord) -> bool:
        msg = str(record.msg)
        if getattr(_interrupt, "fired", False) and "aborted by an interrupt signal" in record.getMessage():
            return False
        if record.exc_info and (isinstance(record.exc_info[1], DxplainError) or store_unreachable(record.exc_info[1])):
            return False
        if msg.startswith("Finished in state Failed") and any(
            f"{n}:" in record.getMessage() for n in (*_error_names(), *NO_ANSWER)
        ):
            return False
        return not (
            msg.startswith("Finished in state Completed")
            and record.name == "prefect.task_runs"
            or msg.startswith("View at ")
        )


def set_volume(quiet: bool, verbose: bool) -> None:
    """Log levels: warnings only (-q), the default (dxplain's and each flow's lines), or everything (-v)."""
    level = logging.WARNING if quiet else logging.DEBUG if verbose else logging.INFO
    if not logging.getLogger().handlers:  # Prefect normally installs the console handler
        logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("dxplain").setLevel(level)
    logging.getLogger("prefect").setLevel(logging.WARNING if quiet else logging.INFO)
    for name in ("prefect.task_runs", "prefect.flow_runs"):
        logger = logging.getLogger(name)
        for f in [f for f in logger.filters if isinstance(f, _Chatter)]:
            logger.removeFilter(f)
        if not verbose:
            logger.addFilter(_Chatter())
    for noisy in ("httpx", "asyncio"):  # request chatter
        logging.getLogger(noisy).setLevel(logging.WARNING)


INTERRUPT_GRACE_SECONDS = 3.0


def _interrupt(signum, frame) -> None:
    """Ctrl-C: stop within seconds, keeping what is written, and say how to resume.

    Prefect's ephemeral server runs in a child process that the terminal's SIGINT stops too, after which a
    flow that is left to unwind retries the dead API for minutes. So the flow gets a KeyboardInterrupt and
    a few seconds to unwind; then this process ends its children (the server, Dask's worker processes) and
    exits with 130. Nothing is lost: shard files are written whole and renamed, LATEST moves only after
    the manifest, and a rerun of the same command resumes from the shards written. A second Ctrl-C exits
    at once.
    """
    if getattr(_interrupt, "fired", False):
        _stop_children_and_exit()
    _interrupt.fired = True
    # Not print(): inside a flow Prefect's log_prints would turn it into a task's log record.
    sys.stderr.write(
        "\ndxplain: interrupted; stopping. Finished work is kept (a trained model, every shard "
        "written): run the same command again to resume.\n"
    )
    sys.stderr.flush()
    threading.Timer(INTERRUPT_GRACE_SECONDS, _stop_children_and_exit).start()
    raise KeyboardInterrupt


def _stop_children_and_exit() -> None:
    import psutil  # a dependency of distributed

    children = psutil.Process().children(recursive=True)
    for child in children:
        try:
            child.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(children, timeout=2)
    for child in alive:
        try:
            child.kill()
        except psutil.Error:
            pass
    sys.stderr.flush()
    os._exit(130)
