"""mitmproxy's per-message type check, with the same verdicts at a fraction of the cost.

mitmproxy checks the field types of every HTTP request and response it builds (`MessageData.__post_init__`,
under `__debug__`): for each field, `typing.get_origin` of its annotation and `isinstance` against it, through
`typecheck.check_option_type`. That is a few per cent of the proxy's CPU per request (measured with py-spy:
about 5% of the loop's samples on kept-alive HTTPS). `install_fast_message_check` gives RequestData and
ResponseData a check that accepts a value whose exact type the annotation names (`bytes`, `Headers`, `float`,
`None` in `bytes | None`...), which `check_option_type` would accept too, and asks `check_option_type` itself
about anything else: what passed before passes, what raised raises the same TypeError, in the same field order.
"""
from __future__ import annotations

import typing
from dataclasses import fields
from types import UnionType

from mitmproxy import http
from mitmproxy.utils import typecheck

Plan = tuple[tuple[str, frozenset, object], ...]        # (field name, exact types accepted at once, annotation)


def exact_types(annotation: object) -> frozenset:
    """The types whose instances (exactly that type) `check_option_type` accepts for `annotation` without
    looking further: the annotation itself when it is a class, each class of a union. Nothing else (those values
    go to `check_option_type`)."""
    if typing.get_origin(annotation) in (typing.Union, UnionType):
        return frozenset(t for t in typing.get_args(annotation) if isinstance(t, type))
    if isinstance(annotation, type) and typing.get_origin(annotation) is None:
        return frozenset((annotation,))
    return frozenset()


def plan_for(cls: type) -> Plan:
    return tuple((f.name, exact_types(f.type), f.type) for f in fields(cls))


def fast_check(plan: Plan):
    check = typecheck.check_option_type

    def __post_init__(self) -> None:
        values = self.__dict__
        for name, exact, annotation in plan:
            value = values[name]
            if type(value) not in exact:
                check(name, value, annotation)
    return __post_init__


def install_fast_message_check() -> None:
    """Give mitmproxy's RequestData and ResponseData the fast check. Idempotent; nothing to do when Python runs
    with -O (mitmproxy defines no check then)."""
    if getattr(http.MessageData, "__post_init__", None) is None:
        return
    for cls in (http.RequestData, http.ResponseData):
        # every field is set by the dataclass's __init__ (so it is in the instance's __dict__ by __post_init__)
        if "__post_init__" not in cls.__dict__ and all(f.init for f in fields(cls)):
            cls.__post_init__ = fast_check(plan_for(cls))
