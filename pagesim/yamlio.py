"""Reading YAML the way pagesim's users write it: numbers as YAML 1.2 reads them, no
duplicate keys, and one-line errors.

PyYAML implements YAML 1.1, where ``1e6`` and ``5e-2`` are strings (1.1 wants a dot
and a signed exponent: ``1.0e+6``). YAML 1.2, and every user, reads them as numbers:
:class:`Loader` adds the 1.2 float pattern. A mapping that repeats a key would
silently keep the last value; here it is an error naming the key and both lines.
A document nested deeper than :data:`MAX_DEPTH` (no pagesim file nests more than a
handful of levels; PyYAML builds nested nodes recursively, and a few thousand levels
exhaust Python's stack) is an error of one line too, found before it is built.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from pagesim.errors import ConfigError

#: the deepest nesting of collections a document may have
MAX_DEPTH = 64

#: YAML 1.2 core schema floats (plus 1.1's ``1_000.5``-style underscores, which PyYAML keeps).
_FLOAT_12 = re.compile(
    r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
    |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""",
    re.X,
)


class Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 floats and an error on duplicate mapping keys."""


Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:float"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
Loader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT_12, list("-+0123456789."))


def _mapping(loader: Loader, node: yaml.MappingNode) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    key_to_line: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        line = key_node.start_mark.line + 1
        if key in key_to_line:
            raise yaml.constructor.ConstructorError(
                None, None,
                f"duplicate key {key!r} (line {line}; first at line {key_to_line[key]})",
                key_node.start_mark,
            )  # fmt: skip
        key_to_line[key] = line
    return loader.construct_mapping(node, deep=True)


Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def one_line(exc: yaml.YAMLError) -> str:
    """A YAML error as one line: the problem and where (line, column)."""
    problem = getattr(exc, "problem", None)
    mark = getattr(exc, "problem_mark", None)
    if problem and mark is not None:
        return f"line {mark.line + 1}, column {mark.column + 1}: {problem}"
    return " ".join(str(exc).split())


def _nesting_problem(text: str) -> str | None:
    """Where the document first nests deeper than MAX_DEPTH (None: it does not), from
    PyYAML's token stream: no recursion, and nothing is built."""
    depth = 0
    starts = (yaml.BlockMappingStartToken, yaml.BlockSequenceStartToken,
              yaml.FlowMappingStartToken, yaml.FlowSequenceStartToken)  # fmt: skip
    ends = (yaml.BlockEndToken, yaml.FlowMappingEndToken, yaml.FlowSequenceEndToken)
    for token in yaml.scan(text, Loader=Loader):
        if isinstance(token, starts):
            depth += 1
            if depth > MAX_DEPTH:
                mark = token.start_mark
                return (
                    f"line {mark.line + 1}, column {mark.column + 1}: nested more than "
                    f"{MAX_DEPTH} levels deep"
                )
        elif isinstance(token, ends):
            depth -= 1
    return None


def load(text: str, source: str) -> Any:
    """The YAML document in ``text``; a one-line ConfigError naming ``source`` otherwise."""
    try:
        problem = _nesting_problem(text)
        if problem is not None:
            raise ConfigError(f"{source}: {problem}")
        return yaml.load(text, Loader=Loader)  # noqa: S506 - Loader is a SafeLoader
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML: {one_line(exc)}") from None
    except RecursionError:  # aliases nested beyond what the tokens show
        raise ConfigError(f"{source}: nested too deeply to read") from None


def read(path: Any, what: str = "file") -> Any:
    """The YAML document in the file ``path`` (UTF-8); a one-line ConfigError otherwise."""
    from pathlib import Path

    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{path}: not UTF-8 text (byte {exc.start}); save the {what} as UTF-8"
        ) from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read {what} ({exc.strerror})") from None
    return load(text, str(path))
