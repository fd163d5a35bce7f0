"""Inputs whose value the session holds (set before the widget is drawn): drawn with that value as their default.

Streamlit sends a keyed widget's session value to the browser only in the run that set it (its element's
``set_value``); on later runs the browser keeps the value it has. When the browser asks for a rerun before
that run's messages reach it (a click during a session's first run on a busy server: the server drops a
run's unsent messages when the next run starts), it first meets the widget in a later run, draws it at the
element's own default and sends that back as the user's input. Without a default given, that default is a
number input's minimum and a choice's first option: the sidebar came up at "1e-06 TFLOP/s, no memory limit"
on the first preset. So every such input is drawn with the session's value as its default too.
"""

from __future__ import annotations

from typing import Any, Callable

import streamlit as st

__all__ = ["held", "held_default"]


def held(key: str) -> Any:
    """The value the session holds for the input of key ``key``, to pass as the widget's own default.

    Raises
    ------
    KeyError
        The session holds no value for ``key`` (set one before drawing the widget).
    """
    return st.session_state[key]


def held_default(widget: Callable, key: str, options=None) -> dict[str, Any]:
    """The keyword argument that makes ``widget`` (``st.number_input``, ``st.selectbox``... on any container) default
    to :func:`held` ``(key)``: ``index=`` its position in ``options`` for a selectbox or a radio, else ``value=``.

    Raises
    ------
    ValueError
        The held value is not one of ``options``.
    """
    if widget.__name__ in ("selectbox", "radio"):
        return {"index": list(options).index(held(key))}
    return {"value": held(key)}
