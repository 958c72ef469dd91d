"""How values get into the rendered YAML without ever becoming YAML syntax.

Text substitution is the root of template injection: once ``{{ parameter("/name") }}`` is pasted into YAML
text, a value holding ``"x\\nkind: ClusterRole"`` is structure. Quoting every value (a ``finalize`` that emits
JSON strings) stops that but breaks the natural ``name: {{ prefix }}-{{ id }}``, and quoting only "risky"
values is a guessing game. So values are never pasted at all:

1. While Jinja renders, every ``{{ expr }}`` outputs a *marker* (``opbrk<nonce>v<n>e``: letters and digits
   only, a plain scalar in any YAML context) and the value is kept in ``state.slots[n]``. The nonce is random
   per render, so neither the template nor a value can forge a marker.
2. The text, which now holds only the template's own characters plus markers, is parsed as YAML. Its
   structure is therefore exactly what the template author wrote.
3. Each scalar that contains markers is resolved (:func:`resolve_scalar`):

   * a **plain** scalar that is exactly one marker takes the value itself, with its type: a number stays a
     number, a dict placed alone (``spec: {{ pg.spec }}``) becomes a mapping, None is null (and is pruned),
     a string stays that string even if it reads ``true`` or ``{a: b}``;
   * anything else (quoted, block, or markers mixed with text such as ``{{ prefix }}-{{ id }}``) is a string:
     each marker is replaced by the value's text (:func:`as_text`), in one pass that never rescans values.

A string can become structure only if the *template* parses it (``fromYaml``); a value never can.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from jinja2 import Undefined, pass_context
from jinja2.runtime import Context

from opbroker.rendering import state
from opbroker.rendering.errors import RenderError


def marker(nonce: str, index: int) -> str:
    return f"{state.MARKER_PREFIX}{nonce}v{index}e"


@pass_context
def finalize(context: Context, value: Any) -> str:
    """Jinja's ``finalize`` hook: keep the value, output its marker (see the module docstring).

    ``pass_context`` also stops Jinja from folding constant expressions at compile time, so every
    ``{{ }}`` reaches this at render time. A string that already carries markers (a macro's output, a
    ``{% set %}`` block) is resolved to plain text first: it becomes one string value, never structure.
    """
    current = state.current()
    budget = current.budget
    if isinstance(value, str) and current.nonce in value.lower():
        # Its text is charged as it is built; the values in it were charged by their own ``{{ }}``.
        value = substitute_text(value, current, built=True)
        budget.check_written(value, "an interpolated value")
    else:
        # Charged here, not when the YAML is resolved: the slot keeps the value alive until then, so 300
        # values of 1 MB made in a loop (``big ~ i``) are refused as they are made, not after.
        budget.charge_output(budget.check_written(value, "an interpolated value"), "an interpolated value")
    current.slots.append(value)
    current.prepaid.add(len(current.slots) - 1)
    return marker(current.nonce, len(current.slots) - 1)


def as_text(value: Any) -> str:
    """The text a value contributes inside a larger string: JSON spelling for everything but strings."""
    if isinstance(value, str):
        return value
    if value is None or isinstance(value, Undefined):
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return json.dumps(value)
    if isinstance(value, Mapping | list | tuple):
        return json.dumps(plain(value), separators=(",", ":"))
    return str(value)


def plain(value: Any) -> Any:
    """A fresh, JSON-shaped copy of a value: dicts with string keys, lists, scalars. Undefined is None."""
    if value is None or isinstance(value, str | bool | int | float):
        return value
    if isinstance(value, Undefined):
        return None
    if isinstance(value, Mapping):
        return {str(k) if not isinstance(k, str) else k: plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(item) for item in value]
    return str(value)


def substitute_text(text: str, current: state.RenderState, *, built: bool = False) -> str:
    """Replace every marker in ``text`` by its value's text, in one pass (values are never rescanned).

    Markers a filter mangled (``{% set s %}..{% endset %}{{ s | upper }}``) cannot be resolved; rather than
    leak marker debris into a manifest, that is an error whenever the nonce is still recognisable (any change
    of case, a lost prefix or suffix). Detection is best effort; safety is not: debris is template text, and
    a value still cannot get into the structure.

    The result's size is known before it is built (each value's text is estimated), so it is refused past
    the output limit first; see :meth:`~opbroker.rendering.limits.Budget.charge_output` for the account.
    """
    nonce, slots = current.nonce, current.slots
    size, again, literal = len(text), 0, len(text)
    for match in state.MARKER.finditer(text):
        if match.group(1) == nonce:
            index = int(match.group(2))
            size += _text_size(current, slots[index]) - len(match.group(0))
            literal -= len(match.group(0))
            again += _charge(current, index)
    current.budget.check_size(size, "a string with interpolated values")
    # Values are charged once (by their ``{{ }}``) and again for each further copy; the text around them too
    # when it is not the template's own (``built``: a macro's output or a set block put in ``{{ }}``).
    current.budget.charge_output(again + (literal if built else 0), "a string with interpolated values")
    resolved = 0

    def one(match: re.Match[str]) -> str:
        nonlocal resolved
        if match.group(1) != nonce:
            return match.group(0)
        resolved += 1
        return as_text(slots[int(match.group(2))])

    result = state.MARKER.sub(one, text)
    if text.lower().count(nonce) != resolved:
        raise RenderError(
            "an interpolated value was altered after it was output (a filter applied to rendered text such as "
            "a {% set %} block or a macro's output); apply filters to values instead"
        )
    return result


def resolve_scalar(text: str, *, plain_style: bool, current: state.RenderState) -> Any:
    """The value of a YAML scalar from the rendered text (see rule 3 of the module docstring)."""
    if current.nonce not in text.lower():
        return text
    if plain_style:
        whole = state.MARKER.fullmatch(text)
        if whole and whole.group(1) == current.nonce:
            index = int(whole.group(2))
            current.budget.charge_output(_charge(current, index), "an interpolated value")
            return plain(current.slots[index])
    return substitute_text(text, current)


def _charge(current: state.RenderState, index: int) -> int:
    """What writing slot ``index`` into the output costs: nothing the first time (:func:`finalize` charged its
    value), the size of its text each time after (a marker copied into several places writes it again)."""
    if index in current.prepaid:
        current.prepaid.discard(index)
        return 0
    return _text_size(current, current.slots[index])


def _text_size(current: state.RenderState, value: Any) -> int:
    """The size of :func:`as_text` of ``value``, estimated (:mod:`sizing`) rather than built."""
    if isinstance(value, str):
        return len(value)
    if value is None or isinstance(value, Undefined):
        return 0
    return current.budget.size(value)
