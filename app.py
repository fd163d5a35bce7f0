"""PaSE explorer: the Streamlit app's entry point and router.

Run with ``streamlit run app.py``. This file only sets up the page, draws the
shared sidebar (graph, cluster, search options) and hands over to the chosen
page under ``pages/``; the pages only gather inputs, call :mod:`pase` and
draw with the builders in :mod:`ui`.

A ``pages/`` folder beside the entry script puts Streamlit in its older
folder-based navigation until the server process first calls ``st.navigation``:
the first request of a fresh server to ``/compare`` or ``/learn`` runs that page
script alone. So every page script starts with :func:`ui.pagekit.routed`, which
runs this router when it is not already in charge (see there).
"""

from pathlib import Path

import streamlit as st

# The favicon, inline: a material icon as favicon (":material/hub:") is fetched by the browser from
# fonts.gstatic.com, and no request of the app is to leave the machine.
HUB_ICON = (
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 24 24" fill="none" stroke="#ff4b4b" stroke-width="2">'
    '<path d="M12 12 5 5M12 12l7-7M12 12v8"/><circle cx="12" cy="12" r="3" fill="#ff4b4b"/>'
    '<circle cx="5" cy="5" r="2.5" fill="#fff"/><circle cx="19" cy="5" r="2.5" fill="#fff"/>'
    '<circle cx="12" cy="20" r="2.5" fill="#fff"/></svg>'
)

st.set_page_config(page_title="PaSE explorer", page_icon=HUB_ICON, layout="wide")

from ui.pagekit import run_routed  # noqa: E402  (after set_page_config)
from ui.sidebar import problem_sidebar  # noqa: E402
from ui.tour import show_tour, tour_button  # noqa: E402

# Absolute paths: the router also works when a page script runs it (ui.pagekit.routed).
HERE = Path(__file__).resolve().parent
PAGES = [
    st.Page(HERE / "pages/explorer.py", title="Explorer", icon=":material/hub:", default=True),
    st.Page(HERE / "pages/compare.py", title="Compare", icon=":material/compare_arrows:"),
    # The file is named after its URL so that the folder mode (above) finds it at /what-if too.
    st.Page(HERE / "pages/what-if.py", title="What-if", icon=":material/tune:", url_path="what-if"),
    st.Page(HERE / "pages/training.py", title="Training", icon=":material/view_timeline:", url_path="training"),
    st.Page(HERE / "pages/learn.py", title="Learn", icon=":material/school:"),
]

page = st.navigation(PAGES)
problem_sidebar()
tour_button()
show_tour()  # the guided first visit, above whichever page the session opens first
run_routed(page)
