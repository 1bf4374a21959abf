"""YAML read the way `kubectl` reads it, for trace files and `--set` values.

PyYAML follows YAML 1.1, where an unquoted `17:00` is the base-60 integer 1020 and `1:30` is
90; `kubectl apply` (YAML 1.2 rules) keeps both as strings. A Group's window written
`from: 17:00` must mean the same in a trace as in the cluster, so this loader is PyYAML's safe
loader without the base-60 forms of integers and floats; everything else is unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import yaml

#: What `load` raises on text that is not YAML.
YAMLError = yaml.YAMLError

_INT = "tag:yaml.org,2002:int"
_FLOAT = "tag:yaml.org,2002:float"


class _Loader(yaml.SafeLoader):
    """The safe loader with YAML 1.2's numbers (no base 60)."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag not in (_INT, _FLOAT)]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
# PyYAML's own patterns for these tags, less their `[0-9]+(:[0-5]?[0-9])+` alternatives.
_Loader.add_implicit_resolver(
    _INT,
    re.compile(r"^(?:[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+)$"),
    list("-+0123456789"),
)
_Loader.add_implicit_resolver(
    _FLOAT,
    re.compile(
        r"^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?"
        r"|\.[0-9_]+(?:[eE][-+][0-9]+)?"
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
    ),
    list("-+0123456789."),
)


def load(text: str) -> Any:
    """One document (None when empty); raises `yaml.YAMLError` on bad YAML."""
    return yaml.load(text, Loader=_Loader)  # noqa: S506 - a subclass of SafeLoader


def load_all(text: str) -> Iterator[Any]:
    """Every document of a stream; raises `yaml.YAMLError` on bad YAML."""
    return yaml.load_all(text, Loader=_Loader)
