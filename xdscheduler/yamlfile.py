"""Reading a YAML file a user hands us, checked before and while it is parsed: a regular file of
bounded size, UTF-8 text, bounded nesting and aliases, no key given twice, and numbers read as
YAML 1.2 reads them (`1e18` and `1.2e10` are numbers, not strings)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from xdscheduler.errors import UserError
from xdscheduler.textfile import read_text

MAX_BYTES = 1 << 20  # 1 MiB: the largest shipped scenario is a few KB
MAX_DEPTH = 32  # nesting of mappings and lists
MAX_ALIASES = 100  # *references to anchors: each can multiply what is built


class _Loader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping (the last would win), and
    nesting and aliases beyond the limits as it meets them, before it recurses or expands."""

    def __init__(self, stream):
        super().__init__(stream)
        self.depth = self.aliases = 0

    def compose_node(self, parent, index):
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            self.aliases += 1
            if self.aliases > MAX_ALIASES:
                raise UserError(f"{self.name}: more than {MAX_ALIASES} aliases (*name)")
        nested = isinstance(event, yaml.CollectionStartEvent)
        self.depth += nested
        if self.depth > MAX_DEPTH:
            raise UserError(
                f"{self.name}: line {event.start_mark.line + 1} is nested "
                f"{self.depth} deep; at most {MAX_DEPTH} levels are read"
            )
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= nested

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: dict = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"key {key!r} given twice (first on line {seen[key] + 1})",
                    key_node.start_mark,
                )
            try:
                seen[key] = key_node.start_mark.line
            except TypeError:  # an unhashable key: the base class says so
                break
        return super().construct_mapping(node, deep=deep)


# YAML 1.2 floats: a dot or an exponent, the exponent's sign optional (YAML 1.1 wants both).
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"^[-+]?(?:[0-9][0-9_]*\.[0-9_]*(?:[eE][-+]?[0-9]+)?|\.[0-9_]+(?:[eE][-+]?[0-9]+)?"
        r"|[0-9][0-9_]*[eE][-+]?[0-9]+)$"
    ),
    list("-+0123456789."),
)


def read_yaml(path: str | Path, what: str = "file") -> object:
    """The parsed document at `path`; UserError naming the file and what is wrong with it."""
    path = Path(path)
    text = read_text(path, what, MAX_BYTES, "YAML")
    loader = _Loader(text)
    loader.name = str(path)
    try:
        return loader.get_single_data()  # a SafeLoader: builds plain data only
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        problem = getattr(err, "problem", None) or err
        raise UserError(f"{path}:{where} is not valid YAML: {problem}") from None
    finally:
        loader.dispose()
