"""Command-line help in the usual form: ``--prune / --no-prune``, ``PATH...``, ``INTEGER``.

typer 0.29 labels every parameter with its Python type (``--prune <bool>``,
``paths... <list[Path]>``, even ``--help <bool>``). A :class:`HelpTyper` app shows the metavars
command-line users know instead: none on a flag, ``PATH`` / ``INTEGER`` / ``FLOAT`` / ``TEXT``
on a value, ``[a|b]`` for a choice, ``...`` after an argument that takes several. Parsing is
unchanged.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, get_args

import typer
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption
from typer.models import CommandFunctionType

if TYPE_CHECKING:  # typer vendors click and re-exports neither name
    from typer._click.core import Context, Parameter

_NAMES: dict[Any, str] = {int: "INTEGER", float: "FLOAT", str: "TEXT", bool: "BOOLEAN", Path: "PATH"}


def metavar(param: TyperArgument | TyperOption) -> str | None:
    """What help shows for ``param``'s value: ``None`` for a flag (it takes none), an explicit
    ``metavar=`` as given, else ``PATH``, ``INTEGER``, ``FLOAT``, ``TEXT`` or ``[a|b]``, with
    ``...`` when it takes several values at once (an argument such as ``PATH...``)."""
    if isinstance(param, TyperOption) and (param.is_flag or param.count):
        return None
    if param.metavar is not None:
        return param.metavar
    desc = param.type_descriptor
    if desc.is_choice:
        name = "[" + "|".join(str(getattr(choice, "value", choice)) for choice in desc.choices or ()) + "]"
    elif desc.is_path:
        name = "PATH"
    else:
        element = get_args(desc.annotation)[0] if desc.is_list else desc.annotation
        name = _NAMES.get(element, getattr(element, "__name__", str(element)).upper())
    return f"{name}..." if param.nargs != 1 else name  # a repeatable option takes one value per use


class _Argument(TyperArgument):
    def display_type_rich(self, ctx: Context) -> str | None:
        return metavar(self)


class _Option(TyperOption):
    def display_type_rich(self, ctx: Context) -> str | None:
        return metavar(self)


def _conventional(param: Parameter) -> Parameter:
    """``param`` shown with :func:`metavar` (its class swapped for a subclass that only changes
    the help display; typer builds the parameters itself and offers no hook for this)."""
    if type(param) is TyperArgument:
        param.__class__ = _Argument
    elif type(param) is TyperOption:
        param.__class__ = _Option
    return param


class HelpCommand(TyperCommand):
    """A command whose help shows conventional metavars (its ``--help`` included)."""

    def get_params(self, ctx: Context) -> list[Parameter]:
        return [_conventional(p) for p in super().get_params(ctx)]


class HelpGroup(TyperGroup):
    """A command group whose help shows conventional metavars."""

    def get_params(self, ctx: Context) -> list[Parameter]:
        return [_conventional(p) for p in super().get_params(ctx)]


class HelpTyper(typer.Typer):
    """:class:`typer.Typer` whose group and commands are :class:`HelpGroup` / :class:`HelpCommand`."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(cls=HelpGroup, **kwargs)

    def command(self, name: str | None = None, *, cls: type[TyperCommand] | None = HelpCommand,
                **kwargs: Any) -> Callable[[CommandFunctionType], CommandFunctionType]:
        """:meth:`typer.Typer.command` with ``cls`` defaulting to :class:`HelpCommand`."""
        return super().command(name, cls=cls, **kwargs)
