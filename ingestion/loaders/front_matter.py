"""YAML front matter (the ``---`` block atop a Markdown file), read safely and within bounds.

Read with PyYAML's safe loader, with every plain scalar kept as the string written (``id: 007``
is the key ``007``, not 7; ``yes``, ``1.10`` and ``2026-01-20`` stay strings; only an empty
value or ``null``/``~`` is None).

Bounds (:mod:`ingestion.loaders.limits`). YAML aliases (``*name``) repeat an anchored node
(``&name``) without copying it, so 300 bytes of nested aliases stand for millions of values
(the "billion laughs" bomb) that any reader of the result -- ``str()``, ``json.dumps``, the
chunker -- then expands. Aliases are legitimate YAML, so they are not refused; instead, as
the YAML libraries that guard against this do (SnakeYAML's alias limit, go-yaml's expansion
ratio), the loader measures the document at *compose* time, before a single Python object is
constructed: every node records its size with aliases expanded (nodes, scalar characters),
computed once per node from its children, so the measure costs one pass over the text. A
document past :data:`~limits.MAX_YAML_NODES` or :data:`~limits.MAX_YAML_SCALAR_CHARS`, nested
past :data:`~limits.MAX_NESTING_DEPTH`, with an alias inside its own anchor, or whose block is
over :data:`~limits.MAX_FRONT_MATTER_CHARS`, fails the file with
:class:`~ingestion.errors.LimitExceededError` at the first node that crosses the bound.
"""

from __future__ import annotations

import re
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from ingestion.errors import LimitExceededError, ParseError
from ingestion.loaders import limits

FRONT_MATTER_RE = re.compile(r"\A(?:\ufeff)?---[ \t]*\r?\n(.*?)\r?\n(?:---|\.\.\.)[ \t]*(?:\r?\n|\Z)", re.DOTALL)


class _BoundedComposer(Composer):
    """PyYAML's composer, measuring each node as it is composed (see the module docstring)."""

    _depth: int
    _expanded: dict[int, tuple[int, int]]  # id(node) -> (nodes, scalar characters) with aliases expanded

    def compose_node(self, parent: Node | None, index: Any) -> Node:
        """Compose one node as PyYAML does, then measure it (see the module docstring)."""
        if self.check_event(yaml.AliasEvent):
            anchor = self.peek_event().anchor
            target = self.anchors.get(anchor)
            if target is not None and id(target) not in self._expanded:
                raise LimitExceededError(f"YAML front matter: alias *{anchor} refers to its own anchor "
                                         "(a recursive structure); not ingested")
            return Composer.compose_node(self, parent, index)  # the anchored node, already measured
        self._depth += 1
        if self._depth > limits.MAX_NESTING_DEPTH:
            raise LimitExceededError(f"YAML front matter nests deeper than {limits.MAX_NESTING_DEPTH} levels "
                                     "(MAX_NESTING_DEPTH)")
        try:
            node = Composer.compose_node(self, parent, index)
        finally:
            self._depth -= 1
        self._expanded[id(node)] = self._measure(node)
        return node

    def _measure(self, node: Node) -> tuple[int, int]:
        """(nodes, scalar characters) of ``node`` with aliases expanded, from its measured children.

        Raises:
            LimitExceededError: past :data:`~limits.MAX_YAML_NODES` or :data:`~limits.MAX_YAML_SCALAR_CHARS`.
        """
        if isinstance(node, ScalarNode):
            nodes, chars = 1, len(node.value)
        else:
            children: list[Node] = node.value if isinstance(node, SequenceNode) else [
                part for pair in node.value for part in pair] if isinstance(node, MappingNode) else []
            sizes = [self._expanded[id(child)] for child in children]
            nodes, chars = 1 + sum(n for n, _ in sizes), sum(c for _, c in sizes)
        if nodes > limits.MAX_YAML_NODES:
            raise LimitExceededError(f"YAML front matter has more than {limits.MAX_YAML_NODES:,} values with its "
                                     "aliases expanded (MAX_YAML_NODES): an alias bomb? not ingested")
        if chars > limits.MAX_YAML_SCALAR_CHARS:
            raise LimitExceededError(f"YAML front matter holds more than {limits.MAX_YAML_SCALAR_CHARS:,} characters "
                                     "with its aliases expanded (MAX_YAML_SCALAR_CHARS): an alias bomb? not ingested")
        return nodes, chars


#: libyaml's C parser when PyYAML was built with it (its scanner is ~100x faster on hostile flow
#: nesting: 0.5 s -> 5 ms for 5,000 ``[``), else PyYAML's own; the composer above is Python either way.
_SAFE_BASE: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class StringScalarLoader(_BoundedComposer, _SAFE_BASE):
    """PyYAML's safe loader without the implicit int/float/bool/timestamp resolvers, and bounded.

    Plain scalars load as the strings written; ``null``, ``~`` and empty values still load as
    None, and explicit tags (``!!int 7``) are still honoured. Composing a node checks the
    bounds of the module docstring.

    Raises (from ``yaml.load``):
        LimitExceededError: a bound is crossed (message: which, and that aliases count expanded).
        yaml.YAMLError: invalid YAML (an undefined alias among them).
    """

    def __init__(self, stream: str) -> None:
        _SAFE_BASE.__init__(self, stream)  # type: ignore[misc]
        Composer.__init__(self)  # the C loader keeps no Python composer state of its own
        self._depth = 0
        self._expanded = {}


_KEEP_IMPLICIT = {"tag:yaml.org,2002:null", "tag:yaml.org,2002:merge"}
StringScalarLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag in _KEEP_IMPLICIT]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def load_front_matter(text: str) -> object:
    """Parse YAML front matter with :class:`StringScalarLoader` (scalars kept as written, bounded).

    Raises:
        LimitExceededError: over :data:`~limits.MAX_FRONT_MATTER_CHARS`, or a bound of
            :class:`StringScalarLoader`.
        ParseError: invalid YAML, or a value its explicit tag cannot hold (``!!int x``).
    """
    if len(text) > limits.MAX_FRONT_MATTER_CHARS:
        raise LimitExceededError(f"YAML front matter is {len(text):,} characters; the limit is "
                                 f"{limits.MAX_FRONT_MATTER_CHARS:,} (MAX_FRONT_MATTER_CHARS)")
    try:
        return yaml.load(text, Loader=StringScalarLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise ParseError(f"invalid YAML front matter: {exc}") from exc
    except (ValueError, TypeError, OverflowError) as exc:  # an explicit tag the value does not fit
        raise ParseError(f"invalid value in YAML front matter: {exc}") from exc


def split_front_matter(text: str) -> tuple[str | None, str]:
    """``(front matter block or None, the rest of the text)`` of a Markdown file."""
    match = FRONT_MATTER_RE.match(text)
    if match is None:
        return None, text
    return match.group(1), text[match.end():]


def has_front_matter(text: str) -> bool:
    """True when ``text`` starts with a ``---`` YAML front-matter block."""
    return FRONT_MATTER_RE.match(text) is not None
