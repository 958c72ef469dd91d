"""Kubernetes label selectors in their string form (``plan=gold,tier in (a,b),!legacy``). Pure.

The label-selector scheduler renders a plan's ``clusterSelector`` template into such a string and keeps
the SFClusters whose labels it selects; the broker admits a request's ``context.namespace`` when the
Namespace's labels match its configured selector. The grammar and the semantics are apimachinery's ``labels.Parse``
(``=``, ``==``, ``!=``, ``in``, ``notin``, ``key``, ``!key``, ``>``, ``<``; ``!=`` and ``notin`` hold when
the label is absent; an empty selector selects everything; ``in ()`` and a value left out between commas
mean the empty value). No maintained Python library parses this
form, so it is done here and checked against the API server's own selection in
``tests/multicluster/test_scheduling_clusters.py``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum


class SelectorError(ValueError):
    """A selector string that does not parse; the message says where."""


class Operator(StrEnum):
    IN = "in"
    NOT_IN = "notin"
    EXISTS = "exists"
    DOES_NOT_EXIST = "!"
    GREATER = "gt"
    LESS = "lt"


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: Operator
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.operator is Operator.IN:
            return present and value in self.values
        if self.operator is Operator.NOT_IN:
            return not present or value not in self.values
        if self.operator is Operator.EXISTS:
            return present
        if self.operator is Operator.DOES_NOT_EXIST:
            return not present
        try:
            number = int(value or "")
        except ValueError:
            return False
        bound = int(self.values[0])
        return number > bound if self.operator is Operator.GREATER else number < bound

    def __str__(self) -> str:
        if self.operator is Operator.EXISTS:
            return self.key
        if self.operator is Operator.DOES_NOT_EXIST:
            return f"!{self.key}"
        if self.operator is Operator.GREATER:
            return f"{self.key}>{self.values[0]}"
        if self.operator is Operator.LESS:
            return f"{self.key}<{self.values[0]}"
        if len(self.values) == 1:
            return f"{self.key}{'=' if self.operator is Operator.IN else '!='}{self.values[0]}"
        return f"{self.key} {self.operator.value} ({','.join(self.values)})"


@dataclass(frozen=True)
class Selector:
    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        """Every requirement holds (an empty selector selects everything)."""
        return all(requirement.matches(labels or {}) for requirement in self.requirements)

    def failing(self, labels: Mapping[str, str] | None) -> list[Requirement]:
        """The requirements ``labels`` do not meet: what a scheduling failure names."""
        return [r for r in self.requirements if not r.matches(labels or {})]

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.requirements)


_TOKEN = re.compile(r"\s*(?:(?P<op>!=|==|=|!|\(|\)|,|>|<)|(?P<word>[A-Za-z0-9._/-]+))")
_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_KEY = re.compile(rf"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?{_NAME}$")
_VALUE = re.compile(rf"^({_NAME})?$")


@dataclass(frozen=True)
class _Token:
    operator: bool
    text: str
    at: int


def parse(text: str | None) -> Selector:
    """Parse a selector string; raises :class:`SelectorError` naming the problem."""
    return _Parser(text or "").selector()


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = self._tokens(text)
        self.index = 0

    @staticmethod
    def _tokens(text: str) -> list[_Token]:
        tokens: list[_Token] = []
        position = 0
        while text[position:].strip():
            found = _TOKEN.match(text, position)
            if found is None:
                raise SelectorError(f"unexpected character {text[position:].lstrip()[:1]!r} in {text!r}")
            kind = "op" if found.group("op") else "word"
            tokens.append(_Token(kind == "op", found.group(kind), found.start(kind)))
            position = found.end()
        return tokens

    def peek(self) -> _Token | None:
        return self.tokens[self.index] if self.index < len(self.tokens) else None

    def take(self, what: str) -> _Token:
        token = self.peek()
        if token is None:
            raise SelectorError(f"{what} expected at the end of {self.text!r}")
        self.index += 1
        return token

    def at_separator(self) -> bool:
        token = self.peek()
        return token is None or (token.operator and token.text == ",")

    def key(self, token: _Token) -> str:
        if token.operator or not _KEY.match(token.text):
            raise SelectorError(f"{token.text!r} at {token.at} is not a valid label key")
        return token.text

    def value(self, token: _Token) -> str:
        if token.operator or not _VALUE.match(token.text):
            raise SelectorError(f"{token.text!r} at {token.at} is not a valid label value")
        return token.text

    def selector(self) -> Selector:
        requirements: list[Requirement] = []
        while self.peek() is not None:
            requirements.append(self.requirement())
            if self.peek() is None:
                break
            separator = self.take("','")
            if not (separator.operator and separator.text == ","):
                raise SelectorError(f"',' expected at {separator.at}, found {separator.text!r}")
            if self.peek() is None:
                raise SelectorError(f"a requirement expected after the trailing ',' in {self.text!r}")
        return Selector(tuple(requirements))

    def requirement(self) -> Requirement:
        first = self.take("a requirement")
        if first.operator and first.text == "!":
            return Requirement(self.key(self.take("a key after '!'")), Operator.DOES_NOT_EXIST)
        name = self.key(first)
        if self.at_separator():
            return Requirement(name, Operator.EXISTS)
        operator = self.take("an operator")
        if operator.operator and operator.text in ("=", "==", "!="):
            value = "" if self.at_separator() else self.value(self.take("a value"))
            return Requirement(name, Operator.IN if operator.text != "!=" else Operator.NOT_IN, (value,))
        if operator.operator and operator.text in (">", "<"):
            bound = self.take("a number")
            if not re.fullmatch(r"-?\d+", bound.text):
                raise SelectorError(f"{bound.text!r} at {bound.at} is not an integer")
            return Requirement(name, Operator.GREATER if operator.text == ">" else Operator.LESS, (bound.text,))
        if not operator.operator and operator.text in ("in", "notin"):
            opening = self.take("'('")
            if not (opening.operator and opening.text == "("):
                raise SelectorError(f"'(' expected after {operator.text!r} for key {name!r}")
            values: list[str] = []
            expect_value = True
            while True:  # as apimachinery: "()" is {""}, and so is a value missing between commas
                token = self.take("a value or ')'")
                if token.operator and token.text in (")", ","):
                    if expect_value:
                        values.append("")
                    if token.text == ")":
                        break
                    expect_value = True
                    continue
                if not expect_value:
                    raise SelectorError(f"',' expected between values at {token.at}")
                values.append(self.value(token))
                expect_value = False
            return Requirement(name, Operator.IN if operator.text == "in" else Operator.NOT_IN, tuple(values))
        raise SelectorError(f"unknown operator {operator.text!r} at {operator.at} after key {name!r}")
