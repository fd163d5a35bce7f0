"""The app's words for names the library keeps from the paper.

PaSE (Elango, IPDPS 2021) calls a split of any dimension but the batch "parameter" parallelism; the CLI, the
baselines (:data:`pase.strategies.baselines.BASELINES`) and the paper's reproduction keep that name. The app
calls the same split "tensor", as Megatron-LM and its Explorer and Training pages do
(:func:`ui.graphview.kind_of`), so that its pages name the baseline with both words.
"""

from __future__ import annotations

__all__ = ["APP_NAMES", "strategy_name"]

# Library name -> the name the app shows.
APP_NAMES: dict[str, str] = {"parameter parallel": "parameter (tensor) parallel"}


def strategy_name(name: str) -> str:
    """The app's name of the strategy (or baseline) the library names ``name``; any other name as it is.

    >>> strategy_name("parameter parallel")
    'parameter (tensor) parallel'
    >>> strategy_name("Megatron")
    'Megatron'
    """
    return APP_NAMES.get(name, name)
