"""Helpers the pure plans' table tests share."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterable
from typing import Any

from opbroker.controller.core import actions as a


def timeless(actions: Iterable[Any]) -> list[Any]:
    """The actions with every condition's transition time dropped (it is the clock's, not the plan's)."""
    shown = []
    for action in actions:
        if isinstance(action, a.WriteStatus):
            patch = copy.deepcopy(dict(action.patch))
            for condition in patch.get("conditions") or []:
                condition.pop("lastTransitionTime", None)
            action = dataclasses.replace(action, patch=patch)
        shown.append(action)
    return shown
