"""The app's helpers: figure builders, tables, graph views and Streamlit glue.

Everything here only formats and draws what :mod:`pase` computes; no cost
logic lives in the UI. Only :mod:`ui.state`, :mod:`ui.sidebar` and :mod:`ui.pagekit` import
Streamlit, so the rest is testable without it.
"""
