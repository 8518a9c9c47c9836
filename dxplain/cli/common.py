"""What every command shares: options read from a flow's signature, validation before Prefect starts.

A flow's keyword parameters are the single source of its defaults: ``flow_options`` turns the ones a
command exposes into flags (type and default from the signature, help text from the command module), and
``run_flow`` validates the values against the flow's ``CONSTRAINTS`` before calling it, so a bad value
fails at once, before any Prefect server or cluster starts.
"""

from __future__ import annotations

import argparse
import inspect
import json
import re
import types
import typing

from ..params import flag, validate


def _base_type(hint):
    """``int | None`` → int; ``str`` → str."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return args[0] if len(args) == 1 else str
    return hint


def param_docs(fn) -> dict[str, str]:
    """Parameter → description, from the numpydoc ``Parameters`` section of ``fn``'s docstring (lines
    ``name : type`` or ``a, b, c``, each followed by its indented description)."""
    doc = inspect.getdoc(getattr(fn, "fn", fn)) or ""
    section = re.search(r"^Parameters\n-+\n(.*?)(?=^\w[^\n]*\n-+\n|\Z)", doc, re.S | re.M)
    out: dict[str, str] = {}
    names: list[str] = []
    for line in (section.group(1) if section else "").splitlines():
        if line.strip() and not line.startswith(" "):
            names = [n.strip() for n in line.split(":")[0].split(",")]
            out.update({n: "" for n in names})
        elif line.strip():
            for n in names:
                out[n] = f"{out[n]} {line.strip()}".strip()
    return out


def flow_options(
    p: argparse.ArgumentParser,
    flow,
    names: list[str] | dict[str, str],
    types_: dict | None = None,
    helps: dict[str, str] | None = None,
) -> None:
    """Add a flag per parameter in ``names``: type and default from ``flow``'s signature, help from its
    docstring's ``Parameters`` section (``helps``, or ``names`` given as a name → help dict, override it),
    so a flow documents its options once."""
    if isinstance(names, dict):
        helps, names = {**names, **(helps or {})}, list(names)
    fn = getattr(flow, "fn", flow)
    sig, hints, docs = inspect.signature(fn), typing.get_type_hints(fn), {**param_docs(fn), **(helps or {})}
    for name in names:
        text = docs[name].rstrip(".").replace("%", "%%")  # KeyError here: a flag the flow does not document
        default = sig.parameters[name].default
        kind = (types_ or {}).get(name) or _base_type(hints[name])
        flags = [flag(name), f"--{name}"] if len(name) == 1 else [flag(name)]  # -m and --m, -k and --k
        if kind is bool:
            p.add_argument(*flags, dest=name, action="store_true", default=default, help=text)
            continue
        shown = f" (default {default})" if default not in (None, inspect.Parameter.empty) else ""
        p.add_argument(
            *flags,
            dest=name,
            type=kind,
            default=default,
            help=text + shown,
            required=default is inspect.Parameter.empty,
        )
    p.set_defaults(flow_params=[*(p.get_default("flow_params") or []), *names])


def run_options(p: argparse.ArgumentParser, flow, shards: str | None, in_memory: str, out: bool = True) -> None:
    """Where results go and where the work runs: the same for every flow (``out=False`` when the flow
    documents its own ``--out``, e.g. a CLI contract's result folder)."""
    helps = {
        "out": "output folder (default dxplain-out, or DXPLAIN_OUT)",
        "scheduler": "tcp://HOST:PORT of an existing Dask scheduler (default: a LocalCluster)",
        "workers": "LocalCluster worker processes (default 2, or DXPLAIN_WORKERS)",
        "shards": shards,
        "in_memory": f"{in_memory} in this process (no Dask)",
    }
    flow_options(
        p,
        flow,
        [n for n in ("out", "scheduler", "workers", "shards", "in_memory") if helps[n] and (out or n != "out")],
        helps=helps,
    )


def flow_kwargs(a: argparse.Namespace) -> dict:
    return {name: getattr(a, name) for name in a.flow_params}


def precheck(kwargs: dict, named_only: bool = False, interactions: bool = False) -> None:
    """The cheap checks of inputs every flow shares, before any Prefect server or cluster starts: the
    dataset exists (unless ``named_only``: the flow takes only the dataset names its constraints list)
    and, for flows on (user, item, rating) interactions (``interactions``), reads as one, and their
    ``--model`` exists; ``--out`` is not a file; the scheduler answers."""
    from pathlib import Path

    from ..config import Settings
    from ..datasets.registry import ALIASES, check_dataset
    from ..errors import InputError
    from ..io.atomic import exists, is_local
    from ..io.dataset_folders import check_interactions

    if kwargs.get("dataset") and not named_only:
        check_dataset(kwargs["dataset"])
        if interactions and kwargs["dataset"].lower() not in ALIASES and is_local(kwargs["dataset"]):  # a path
            check_interactions(kwargs["dataset"], need_unrated="top_n" in kwargs and not kwargs.get("targets"))
    model = kwargs.get("model") if interactions else None  # a stored factor model (evaluate's is a name)
    if isinstance(model, str) and is_local(model) and not exists(model):
        raise InputError(
            f"--model {model}: no such model store; give a folder written by `dxplain train` or "
            "`dxplain import-embeddings`, or drop --model to train one"
        )
    targets = kwargs.get("targets")  # a file of pairs (refresh); evaluate's is a count
    if isinstance(targets, str) and is_local(targets) and not exists(targets):
        raise InputError(f"--targets {targets}: no such file; check the path")
    out = kwargs.get("out") or Settings.from_env().out
    if "://" in str(out):
        from ..io.atomic import filesystem

        filesystem(out)  # its filesystem is installed
    elif Path(out).is_file():
        raise InputError(f"--out {out}: is a file; give a folder (it is created)")
    scheduler = kwargs.get("scheduler") or (None if kwargs.get("in_memory") else Settings.from_env().scheduler)
    if scheduler and not kwargs.get("in_memory"):
        from ..distributed.cluster import check_reachable

        check_reachable(scheduler)


def run_flow(flow, constraints: dict, a: argparse.Namespace, interactions: bool = False, check=None) -> dict:
    """Validate the options and check the inputs (fails before Prefect starts), then run the flow and
    return its summary. ``interactions``: the flow's dataset is (user, item, rating) interactions;
    ``check(kwargs)``: the command's own check, after the options'."""
    kwargs = flow_kwargs(a)
    validate(constraints, kwargs)
    if check is not None:
        check(kwargs)
    precheck(kwargs, named_only="dataset" in constraints, interactions=interactions)
    return flow(**kwargs)


def print_summary(summary: dict) -> None:
    print(json.dumps(summary, indent=2, default=str))


def target_arguments(p: argparse.ArgumentParser, dataset_help: str) -> None:
    """``--user U --item I [--dataset D]``: the one (user, item) a reading command explains."""
    p.add_argument("--user", required=True, help="the user's original id")
    p.add_argument("--item", required=True, help="the item's original id")
    p.add_argument("--dataset", help=dataset_help)
