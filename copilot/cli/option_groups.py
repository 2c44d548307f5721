"""Typer options that a command receives as one value.

Typer makes one command-line option of each parameter of a command, so related options (the
search filters, the settings ``copilot serve`` overrides) would each be a parameter of every
command that takes them. :func:`option_group` declares them once: the command shows the same
flags, in the same place, and receives what ``fold`` makes of them as one parameter.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

Command = TypeVar("Command", bound=Callable[..., Any])


def option(name: str, annotation: Any, info: Any) -> inspect.Parameter:
    """One option of a group: the parameter ``name: annotation = info`` (``info``: a
    ``typer.Option``) that typer reads as a flag."""
    return inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=info, annotation=annotation)


def option_group(name: str, options: Sequence[inspect.Parameter],
                 fold: Callable[..., Any]) -> Callable[[Command], Command]:
    """Give a command ``options`` in place of its parameter ``name``, which receives
    ``fold(**values of the options)``.

    ``fold`` runs when the command is invoked, before its body; a ``typer.BadParameter`` or
    ``typer.Exit`` it raises ends the command as if the body had raised it.
    """
    def decorate(command: Command) -> Command:
        signature = inspect.signature(command)
        params = list(signature.parameters.values())
        at = [p.name for p in params].index(name)
        params[at:at + 1] = options
        names = [p.name for p in options]

        @functools.wraps(command)
        def run(**values: Any) -> Any:
            folded = fold(**{n: values.pop(n) for n in names})
            return command(**values, **{name: folded})

        run.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
        run.__annotations__ = {p.name: p.annotation for p in params}
        return run  # type: ignore[return-value]

    return decorate
