"""A small wrapper around ``cel-python`` (``celpy``) for the fake API server (F44, F45, F47 of
``docs/fake-apiserver.md``).

Expressions are compiled once per process and cached by their text. Compilation rejects any function
that is not part of standard CEL (for example Kubernetes' ``quantity()``, ``url()`` or the string
and list extension libraries), so that a CRD using one fails loudly when it is loaded instead of
passing silently at evaluation time (F47).

Values cross the boundary as plain JSON values (``dict``, ``list``, ``str``, ``int``, ``float``,
``bool``, ``None``): :func:`to_cel` converts them to CEL values (JSON integers become CEL ``int``,
JSON floats CEL ``double``) and :func:`from_cel` converts results back.

Each :class:`Program` also records its ``dependencies``: the field paths it reads from ``self``
and ``oldSelf`` (found in the parse tree), which the schema module uses to reuse the outcome of a
rule whose inputs did not change.

``optionalOldSelf`` (F45) is modelled with :class:`OptionalValue` and the three functions
``hasValue()``, ``value()`` and ``orValue()``; the ``.?field`` syntax of CEL optionals is not
supported by the parser and is rejected at compile time like any other syntax error.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import celpy
from celpy import celtypes

# celpy traces every step of an evaluation at DEBUG (and a few at INFO), each record carrying
# the whole activation, whose repr is the object being validated: with the root logger at
# DEBUG, formatting those records cost more than the evaluations themselves (87,712 records in
# one run of the seeded mix). Its own loggers are kept at WARNING; nothing else is changed.
logging.getLogger("celpy").setLevel(logging.WARNING)

__all__ = [
    "CELCompileError",
    "CELEvalError",
    "Dependency",
    "OptionalValue",
    "Program",
    "compile_cel",
    "compile_expression",
    "from_cel",
    "to_cel",
]

# Functions and macros of standard CEL, plus the three optional helpers registered below.
_STANDARD_FUNCTIONS = frozenset(
    {
        "has",
        "all",
        "exists",
        "exists_one",
        "map",
        "filter",
        "size",
        "contains",
        "startsWith",
        "endsWith",
        "matches",
        "int",
        "uint",
        "double",
        "string",
        "bytes",
        "bool",
        "type",
        "dyn",
        "duration",
        "timestamp",
        "getDate",
        "getDayOfMonth",
        "getDayOfWeek",
        "getDayOfYear",
        "getFullYear",
        "getHours",
        "getMilliseconds",
        "getMinutes",
        "getMonth",
        "getSeconds",
        "hasValue",
        "value",
        "orValue",
    }
)


class CELCompileError(ValueError):
    """An expression does not parse, or uses a function outside standard CEL."""


class CELEvalError(RuntimeError):
    """Evaluating a compiled expression failed (no such key, no matching overload, ...)."""


@dataclass(frozen=True)
class OptionalValue:
    """A CEL optional, used for ``oldSelf`` of rules with ``optionalOldSelf: true``."""

    value: Any
    present: bool


def _has_value(opt: Any) -> Any:
    if not isinstance(opt, OptionalValue):
        raise TypeError("hasValue() applies to optionals only")
    return celtypes.BoolType(opt.present)


def _value(opt: Any) -> Any:
    if not isinstance(opt, OptionalValue):
        raise TypeError("value() applies to optionals only")
    if not opt.present:
        raise ValueError("optional.none() dereference")
    return opt.value


def _or_value(opt: Any, default: Any) -> Any:
    if not isinstance(opt, OptionalValue):
        raise TypeError("orValue() applies to optionals only")
    return opt.value if opt.present else default


_OPTIONAL_FUNCTIONS: dict[str, Any] = {
    "hasValue": _has_value,
    "value": _value,
    "orValue": _or_value,
}


def to_cel(value: Any) -> Any:
    """Convert a plain JSON value to a CEL value (``int`` stays ``int``, ``float`` → ``double``)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return celtypes.BoolType(value)
    if isinstance(value, int):
        return celtypes.IntType(value)
    if isinstance(value, float):
        return celtypes.DoubleType(value)
    if isinstance(value, str):
        return celtypes.StringType(value)
    if isinstance(value, Mapping):
        return celtypes.MapType({celtypes.StringType(k): to_cel(v) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return celtypes.ListType([to_cel(v) for v in value])
    if isinstance(value, OptionalValue):
        return value
    raise TypeError(f"cannot convert {type(value).__name__} to a CEL value")


def from_cel(value: Any) -> Any:
    """Convert a CEL result back to a plain JSON-like Python value."""
    if value is None:
        return None
    if isinstance(value, celtypes.BoolType):
        return bool(value)
    if isinstance(value, (celtypes.IntType, celtypes.UintType)):
        return int(value)
    if isinstance(value, celtypes.DoubleType):
        return float(value)
    if isinstance(value, celtypes.StringType):
        return str(value)
    if isinstance(value, Mapping):
        return {from_cel(k): from_cel(v) for k, v in value.items()}
    if isinstance(value, list):
        return [from_cel(v) for v in value]
    if isinstance(value, OptionalValue):
        return from_cel(value.value) if value.present else None
    return value


def _walk_names(tree: Any, functions: set[str], idents: set[str]) -> None:
    """Collect the names of called functions and of referenced identifiers in a celpy tree."""
    stack = [tree]
    while stack:
        node = stack.pop()
        data = getattr(node, "data", None)
        children = getattr(node, "children", None)
        if data is None or children is None:
            continue
        if data in ("ident_arg", "member_dot_arg"):
            token = children[0] if data == "ident_arg" else children[1]
            functions.add(str(token))
        elif data == "ident":
            idents.add(str(children[0]))
        stack.extend(children)


_VARIABLES = ("self", "oldSelf")

# One thing an expression reads from ``self`` or ``oldSelf``: (variable, presence_only, path).
# ``presence_only`` is True for the argument of ``has()``, which reads only whether each field of
# the path is there; otherwise the value at the path (or where the path stops) is read.
Dependency = tuple[str, bool, tuple[str, ...]]


def _dependencies(tree: Any) -> tuple[Dependency, ...]:
    """What the expression reads from ``self``/``oldSelf``, as field paths (see :class:`Program`).

    Every mention of ``self`` or ``oldSelf`` is followed up through the chain of ``.field``
    selections that starts at it; the chain ends at anything else (an index, a method call, an
    operator), and the value at the end of the chain is what the expression can see. A chain that
    is the whole argument of ``has()`` needs only presence. A bare variable gives the empty path
    (the whole value). This over-approximates what the expression reads, which is what a cache
    key needs.
    """
    parents: dict[int, Any] = {}
    idents: list[Any] = []
    stack = [tree]
    while stack:
        node = stack.pop()
        children = getattr(node, "children", None)
        if children is None:
            continue
        if getattr(node, "data", None) == "ident" and str(children[0]) in _VARIABLES:
            idents.append(node)
        for child in children:
            if getattr(child, "data", None) is not None:
                parents[id(child)] = node
                stack.append(child)
    found: set[Dependency] = set()
    for ident in idents:
        path: list[str] = []
        top = parents.get(id(ident))  # primary
        member = parents.get(id(top)) if top is not None else None  # member
        while member is not None:
            parent = parents.get(id(member))
            if (
                parent is not None
                and getattr(parent, "data", None) == "member_dot"
                and parent.children[0] is member
            ):
                path.append(str(parent.children[1]))
                member = parents.get(id(parent))
                continue
            break
        found.add((str(ident.children[0]), _is_has_argument(member, parents), tuple(path)))
    return tuple(sorted(found))


_WRAPPERS = frozenset(
    {
        "unary",
        "multiplication",
        "addition",
        "relation",
        "conditionaland",
        "conditionalor",
        "expr",
        "exprlist",
    }
)


def _is_has_argument(member: Any, parents: Mapping[int, Any]) -> bool:
    """True if ``member`` is (through single-child wrappers) the argument of ``has()``."""
    node = member
    while node is not None:
        parent = parents.get(id(node))
        if parent is None:
            return False
        data = getattr(parent, "data", None)
        if data in _WRAPPERS and len(parent.children) == 1:
            node = parent
            continue
        return data == "ident_arg" and str(parent.children[0]) == "has"
    return False


@dataclass(frozen=True, eq=False)
class Program:
    """One compiled CEL expression.

    ``dependencies`` lists what the expression reads from ``self`` and ``oldSelf``
    (:data:`Dependency` triples): the schema module keys its cache of rule outcomes on the values
    at those paths, so that a rule whose inputs did not change is not evaluated again.
    """

    text: str
    functions: frozenset[str]
    identifiers: frozenset[str]
    _runner: Any
    dependencies: tuple[Dependency, ...] = ()

    @property
    def references_old_self(self) -> bool:
        """True if the expression mentions ``oldSelf`` (a transition rule, F45)."""
        return "oldSelf" in self.identifiers

    def evaluate_cel(self, activation: Mapping[str, Any]) -> Any:
        """Evaluate with an activation of CEL values; return the raw CEL result.

        Raises :class:`CELEvalError` on any evaluation error.
        """
        try:
            return self._runner.evaluate(dict(activation))
        except CELEvalError:
            raise
        except Exception as exc:  # celpy raises its own CELEvalError and assorted others
            raise CELEvalError(_describe_error(exc)) from exc

    def evaluate(self, activation: Mapping[str, Any]) -> Any:
        """Evaluate with an activation of plain JSON values; return a plain Python value."""
        return from_cel(self.evaluate_cel({k: to_cel(v) for k, v in activation.items()}))


_NO_SUCH_MEMBER = re.compile(r"^no such member in mapping: '(.*)'$")


def _describe_error(exc: Exception) -> str:
    args = getattr(exc, "args", ())
    text = args[0] if args and isinstance(args[0], str) else str(exc)
    missing = _NO_SUCH_MEMBER.match(text)
    if missing is not None:
        return f"no such key: {missing.group(1)}"  # cel-go's wording
    return text


_ENV_LOCK = threading.Lock()
_ENV: Any = None
_CACHE: dict[str, Program] = {}


def compile_cel(expr: str) -> Program:
    """Compile ``expr`` once per process (cached by its text).

    Raises :class:`CELCompileError` if it does not parse or calls a non-standard function.
    """
    global _ENV
    cached = _CACHE.get(expr)
    if cached is not None:
        return cached
    with _ENV_LOCK:
        cached = _CACHE.get(expr)
        if cached is not None:
            return cached
        if _ENV is None:
            _ENV = celpy.Environment()
        try:
            tree = _ENV.compile(expr)
        except Exception as exc:
            raise CELCompileError(f"cannot compile CEL expression {expr!r}: {exc}") from exc
        functions: set[str] = set()
        idents: set[str] = set()
        _walk_names(tree, functions, idents)
        unknown = sorted(functions - _STANDARD_FUNCTIONS)
        if unknown:
            raise CELCompileError(
                f"CEL expression {expr!r} uses functions outside standard CEL, which the fake API "
                f"server does not implement: {', '.join(unknown)}"
            )
        runner = _ENV.program(tree, functions=dict(_OPTIONAL_FUNCTIONS))
        program = Program(
            expr, frozenset(functions), frozenset(idents), runner, _dependencies(tree)
        )
        _CACHE[expr] = program
        return program


def compile_expression(expr: str) -> Callable[[Mapping[str, Any]], Any]:
    """Compile a general CEL expression once; return a function of a plain-JSON activation.

    The returned function converts the activation's values to CEL, evaluates, and returns plain
    Python values (``bool``/``int``/``float``/``str``/``list``/``dict``/``None``). It raises
    :class:`CELEvalError` if evaluation fails.
    """
    return compile_cel(expr).evaluate
