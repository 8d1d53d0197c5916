"""``fleetmind sched train`` flags generated from the recipe settings (:mod:`.settings`).

Each flag is one field of :class:`~fleetmind.training.recipes.settings.FgdArgs` and/or
:class:`~fleetmind.training.recipes.settings.DynamicArgs`: its type, default and help text are read
from the dataclass field and the docstring under it, so a setting is defined once. :data:`TRAIN_FLAGS`
lists which fields are flags (the others, such as ``learning_rate``, are set from Python only) and
the few that need more than the field says (a repeatable ``--trace``, the inverted
``--no-register``). A field that only one recipe has gets a ``fgd mode:`` / ``dynamic mode:``
prefix in its help; :func:`recipe_kwargs` passes a recipe only the fields it has.

``--algo paired`` has its own recipe settings,
:class:`~fleetmind.training.recipes.settings.PairedArgs`: :data:`PAIRED_FLAGS` are its own flags,
generated the same way into their own argument group; the flags it shares with the PPO recipes (``--trace``, ``--seed``, ``--dyn-jobs``, ``--out``, ...) are
those of :data:`TRAIN_FLAGS`, and one left at the PPO recipes' default gives ``PairedArgs``' own
(``--out`` is ``runs/paired``).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import inspect
import re
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fleetmind import argtypes
from fleetmind.training.recipes import settings
from fleetmind.training.recipes.settings import DYNAMIC_RELEASE_DIR, DynamicArgs, FgdArgs

RECIPES: tuple[type, ...] = (FgdArgs, DynamicArgs)
"""Settings classes whose fields become the :data:`TRAIN_FLAGS` (one parser serves both modes)."""


@dataclass(frozen=True)
class Flag:
    """One ``sched train`` flag: the settings field it sets and what argparse needs beyond it."""

    field: str
    """the settings field (``cem_seeds``)"""
    name: str | None = None
    """the flag (default: ``--`` and the field with dashes, ``--cem-seeds``)"""
    argparse: dict[str, Any] = field(default_factory=dict)
    """extra ``add_argument`` keywords (``action``, ``required``, ``choices``, ``metavar``, ...);
    a ``default`` here replaces the field's"""
    convert: Callable[[Any, argparse.Namespace], Any] | None = None
    """``(parsed value, all parsed flags) -> field value`` when they differ"""
    invert: bool = False
    """a ``store_true`` flag that sets a ``True``-by-default field to ``False`` (``--no-register``)"""

    @property
    def flag(self) -> str:
        return self.name or "--" + self.field.replace("_", "-")

    @property
    def dest(self) -> str:
        return self.flag.removeprefix("--").replace("-", "_")


def _eval_traces(value: list[str] | None, args: argparse.Namespace) -> list[str]:
    return value or list(args.trace[:1])


TRAIN_FLAGS: tuple[Flag, ...] = (
    Flag("traces", "--trace", {"action": "append", "required": True, "default": None}),
    Flag("dyn_jobs"),
    Flag("queue_features"),
    Flag("penalty_features"),
    Flag("timesteps"),
    Flag("seed"),
    Flag("reward", argparse={"choices": ["shaped", "metric"]}),
    Flag("n_envs"),
    Flag("bc_episodes"),
    Flag("teacher"),
    Flag("bc_target_ce"),
    Flag("bc_value_coef"),
    Flag("vf_coef"),
    Flag("bc_fgd_until_pct"),
    Flag("eval_fgd_until_pct"),
    Flag("cem_generations"),
    Flag("cem_population"),
    Flag("cem_seeds"),
    Flag("cem_init"),
    Flag("cem_init_sd"),
    Flag("cem_multi_gpu_block"),
    Flag(
        "cem_trace_seeds",
        argparse={"action": "append", "default": None, "metavar": "TRACE=SEEDS"},
    ),  # parsed to {trace: seeds} by the caller's converter (fleetmind.cli.sched._trace_seeds)
    Flag("cem_worst_weight"),
    Flag("cem_nonneg", argparse={"metavar": "FEATURE"}),
    Flag("cem_max_minutes"),
    Flag("fgd_until_pct"),
    Flag(
        "eval_traces",
        "--eval-trace",
        {"action": "append", "default": None},
        convert=_eval_traces,
    ),
    Flag("eval_seeds"),
    Flag("eval_freq"),
    Flag("max_minutes"),
    Flag("out"),
    Flag("release"),
    Flag("register", "--no-register", invert=True),
)
"""The fields ``fleetmind sched train`` exposes, in ``--help`` order."""


def _released_clone(value: str | None, args: argparse.Namespace) -> str:
    return value or str(DYNAMIC_RELEASE_DIR)


PAIRED_FLAGS: tuple[Flag, ...] = (
    # default None in the parser: --help names the released model, not this machine's path to it
    Flag("init", argparse={"default": None}, convert=_released_clone),
    Flag("iterations"),
    Flag("workloads_per_iter"),
    Flag("group_size"),
    Flag("learning_rate", "--lr"),
    Flag("kl_coef"),
    Flag("baseline"),
    Flag("val_streams"),
    Flag("val_every"),
)
"""The fields of :class:`~fleetmind.training.recipes.settings.PairedArgs` that only ``--algo
paired`` has, in ``--help`` order (built from ``recipes=(PairedArgs,)``)."""


@functools.cache
def field_docs() -> dict[tuple[str, str], str]:
    """``(class name, field) -> docstring`` of every settings field (the string under it)."""
    tree = ast.parse(inspect.getsource(settings))
    docs: dict[tuple[str, str], str] = {}
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        body = cls.body
        for stmt, nxt in zip(body, body[1:], strict=False):
            if (
                isinstance(stmt, ast.AnnAssign)
                and isinstance(stmt.target, ast.Name)
                and isinstance(nxt, ast.Expr)
                and isinstance(nxt.value, ast.Constant)
                and isinstance(nxt.value.value, str)
            ):
                docs[(cls.name, stmt.target.id)] = " ".join(nxt.value.value.split())
    return docs


def _field(
    name: str, recipes: tuple[type, ...] = RECIPES
) -> tuple[dataclasses.Field[Any], type, list[type]]:
    """The field ``name``, the settings class it was read from and every one of ``recipes`` that
    has it."""
    owners = [c for c in recipes if name in {f.name for f in dataclasses.fields(c)}]
    if not owners:
        raise KeyError(f"no recipe setting named {name!r}")
    f = next(f for f in dataclasses.fields(owners[0]) if f.name == name)
    return f, owners[0], owners


def field_default(f: dataclasses.Field[Any]) -> Any:
    """A field's default value (a fresh one from its factory)."""
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None if f.default is dataclasses.MISSING else f.default


def _help(
    name: str, cls: type, owners: list[type], default: Any, show_default: bool, prefix: bool
) -> str:
    doc = next(
        field_docs()[(c.__name__, name)] for c in cls.__mro__ if (c.__name__, name) in field_docs()
    )
    doc = re.sub(r":\w+:`~?([^`]+)`", r"\1", doc).replace("``", "").replace("%", "%%")
    if prefix:
        mode = owners[0].mode
        doc = f"{mode} mode, {doc}" if doc.startswith("teacher=cem:") else f"{mode} mode: {doc}"
    if show_default and "(default" not in doc:
        shown = " ".join(map(str, default)) if isinstance(default, list) else default
        doc += f" (default {shown})"
    return doc


def _value_type(name: str, kind: Any) -> Any:
    """The ``argparse`` type of a field's values: :func:`fleetmind.argtypes.seed` for an integer
    seed field (``seed``, ``*_seed``, ``*_seeds``), :func:`fleetmind.argtypes.finite_float` for a
    float, else the field's own type."""
    if kind is int and (name == "seed" or name.endswith(("_seed", "_seeds"))):
        return argtypes.seed
    if kind is float:  # no recipe setting means anything at nan or inf
        return argtypes.finite_float
    return kind


def add_train_flags(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    flags: tuple[Flag, ...] = TRAIN_FLAGS,
    recipes: tuple[type, ...] = RECIPES,
) -> None:
    """Add ``flags`` to ``parser`` (or an argument group), typed and documented from the fields of
    ``recipes``; a field that only one of several recipes has gets that recipe's mode in its help.
    A ``Literal[...]`` field becomes a flag with those choices."""
    for spec in flags:
        f, cls, owners = _field(spec.field, recipes)
        hints = typing.get_type_hints(cls)
        kind = hints[spec.field]
        if typing.get_origin(kind) in (typing.Union, types.UnionType):  # X | None
            kind = next(a for a in typing.get_args(kind) if a is not type(None))
        base = [kind]
        kw: dict[str, Any] = {"default": field_default(f)}
        origin = typing.get_origin(base[0])
        if spec.invert or base[0] is bool:
            kw = {"action": "store_true"}
        elif origin is typing.Literal:
            kw.update(choices=list(typing.get_args(base[0])))
        elif origin is list:
            kw.update(nargs="+", type=_value_type(spec.field, typing.get_args(base[0])[0]))
        elif base[0] in (int, float):
            kw["type"] = _value_type(spec.field, base[0])
        kw.update(spec.argparse)
        if kw.get("action") == "append":  # one value per use of the flag
            kw.pop("nargs", None)
        show = kw.get("action") != "store_true" and kw.get("default") not in (None, [], {})
        prefix = len(owners) == 1 < len(recipes)
        kw["help"] = _help(spec.field, cls, owners, kw.get("default"), show, prefix)
        parser.add_argument(spec.flag, **kw)


def _parser_default(spec: Flag) -> Any:
    """The default of a :data:`TRAIN_FLAGS` flag in the parser (its field's, or the override)."""
    if spec.invert:
        return False
    return spec.argparse.get("default", field_default(_field(spec.field)[0]))


def recipe_kwargs(
    args: argparse.Namespace,
    cls: type,
    flags: tuple[Flag, ...] = TRAIN_FLAGS,
    convert: dict[str, Callable[[Any], Any]] | None = None,
) -> dict[str, Any]:
    """The settings of recipe ``cls`` that ``flags`` set, from the parsed ``args``; ``convert``
    maps a field to a function of its parsed value (``cem_trace_seeds``: ``TRACE=SEEDS`` items).

    For a ``cls`` outside :data:`RECIPES` (``PairedArgs``), a :data:`TRAIN_FLAGS` flag left at its
    parser default is left out, so that ``cls``' own default applies."""
    convert = convert or {}
    have = {f.name: f for f in dataclasses.fields(cls)}
    out: dict[str, Any] = {}
    for spec in flags:
        if spec.field not in have:
            continue
        value = getattr(args, spec.dest)
        if cls not in RECIPES and spec in TRAIN_FLAGS and value == _parser_default(spec):
            continue
        if spec.invert:
            value = not value
        elif spec.convert is not None:
            value = spec.convert(value, args)
        if spec.field in convert:
            value = convert[spec.field](value)
        out[spec.field] = value
    return out


GROUP_RENAMES: dict[str, str] = {"traces": "--trace", "learning_rate": "--lr"}
"""Flags of :func:`add_recipe_group` whose name is not the field's."""
GROUP_HIDDEN: frozenset[str] = frozenset(
    {"tracking_uri", "experiment", "threads", "progress", "kinds"}
)
"""Settings :func:`add_recipe_group` leaves to Python (no flag)."""
SHARED = "_recipe_shared"
"""Namespace key where :func:`add_recipe_group` records which settings use a shared flag."""
GIVEN = "_recipe_given"
"""Namespace key of the dests of the shared flags given on the command line."""


def _mark_given(action: argparse.Action) -> None:
    """Make ``action`` record its dest in the namespace's :data:`GIVEN` set when it is used (it
    stores its value as before)."""
    if getattr(action, "_marks_given", False):
        return
    base = type(action)

    def call(
        self: Any, parser: Any, namespace: Any, values: Any, option_string: Any = None
    ) -> None:
        setattr(namespace, GIVEN, {*getattr(namespace, GIVEN, ()), self.dest})
        base.__call__(self, parser, namespace, values, option_string)

    action.__class__ = type(base.__name__, (base,), {"__call__": call, "_marks_given": True})


def _group_flag(name: str, default: Any) -> str:
    if name in GROUP_RENAMES:
        return GROUP_RENAMES[name]
    flag = "--" + name.replace("_", "-")
    return flag.replace("--", "--no-", 1) if default is True else flag


def add_recipe_group(parser: argparse.ArgumentParser, cls: type, title: str) -> None:
    """Add one flag per field of the settings dataclass ``cls`` (a recipe outside
    :data:`RECIPES`, e.g. :class:`~fleetmind.training.recipes.settings.DistillArgs`) in an argument group
    ``title``; type, default and help come from the field and its docstring. A ``True``-by-default
    bool becomes ``--no-<field>``. A flag ``parser`` already has (``--trace``, ``--seed``,
    ``--iterations``...) is shared, not added again: it is marked so that
    :func:`recipe_group_kwargs` takes its value only when it was given on the command line (else
    the recipe's own default). Call it after the parser's other flags are added."""
    group = parser.add_argument_group(title)
    existing = {s: a for a in parser._actions for s in a.option_strings}  # noqa: SLF001
    shared_help = []
    hints = typing.get_type_hints(cls)
    docs = field_docs()
    shared: dict[str, str] = {}
    for f in dataclasses.fields(cls):
        if f.name in GROUP_HIDDEN:
            continue
        default = field_default(f)
        flag = _group_flag(f.name, default)
        if flag in existing:
            shared[f.name] = existing[flag].dest
            _mark_given(existing[flag])
            shown = " ".join(map(str, default)) if isinstance(default, list) else default
            shared_help.append(f"{flag} {shown}")
            continue
        kind = hints[f.name]
        if typing.get_origin(kind) in (typing.Union, types.UnionType):  # X | None
            kind = next(a for a in typing.get_args(kind) if a is not type(None))
        kw: dict[str, Any] = {"default": default, "dest": f"{cls.__name__}.{f.name}"}
        if kind is bool:
            kw = {"action": "store_true", "dest": kw["dest"]}
        elif typing.get_origin(kind) is list:
            kw.update(nargs="+", type=_value_type(f.name, typing.get_args(kind)[0]))
        elif kind in (int, float):
            kw["type"] = _value_type(f.name, kind)
        if kind is not bool:
            kw["metavar"] = f.name.upper()
        if f.name == "window":  # a (LO, HI) pair
            kw.update(nargs=2, metavar=("LO", "HI"))
        doc = re.sub(r":\w+:`~?([^`]+)`", r"\1", docs.get((cls.__name__, f.name), ""))
        doc = doc.replace("``", "").replace("%", "%%")
        if kind is not bool and default not in (None, [], {}):
            shown = " ".join(map(str, default)) if isinstance(default, list) else default
            doc += f" (default {shown})"
        kw["help"] = f"turn off: {doc}" if default is True else doc
        group.add_argument(flag, **kw)
    group.description = (
        "flags shared with other recipes take these defaults unless given: "
        + ", ".join(shared_help)
    )
    parser.set_defaults(**{f"{SHARED}.{cls.__name__}": shared})


def recipe_group_kwargs(args: argparse.Namespace, cls: type) -> dict[str, Any]:
    """The settings of ``cls`` from flags added by :func:`add_recipe_group`: its own flags as
    parsed; a shared flag's value when it was given on the command line, else the field's
    default."""
    shared = getattr(args, f"{SHARED}.{cls.__name__}", None) or {}
    given = getattr(args, GIVEN, set())
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name in GROUP_HIDDEN:
            continue
        if f.name in shared:
            if shared[f.name] in given:
                out[f.name] = getattr(args, shared[f.name])
            continue
        value = getattr(args, f"{cls.__name__}.{f.name}")
        out[f.name] = (not value) if field_default(f) is True else value
    return out
