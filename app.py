"""PaSE explorer: the Streamlit app's entry point and router.

Run with ``streamlit run app.py``. This file only sets up the page, draws the
shared sidebar (graph, cluster, search options) and hands over to the chosen
page under ``app_pages/``; the pages only gather inputs, call :mod:`pase` and
draw with the builders in :mod:`ui`.
"""

import streamlit as st

st.set_page_config(page_title="PaSE explorer", page_icon=":material/hub:", layout="wide")

from ui.sidebar import problem_sidebar  # noqa: E402  (after set_page_config)

# The page scripts live in app_pages/, not pages/: a pages/ folder beside the entry script
# switches Streamlit to its older folder-based navigation for the first run of a server
# process, which then ignores this router (a first visit to /what-if ran the page alone).
PAGES = [
    st.Page("app_pages/explorer.py", title="Explorer", icon=":material/hub:", default=True),
    st.Page("app_pages/compare.py", title="Compare", icon=":material/compare_arrows:"),
    st.Page("app_pages/what_if.py", title="What-if", icon=":material/tune:", url_path="what-if"),
    st.Page("app_pages/learn.py", title="Learn", icon=":material/school:"),
]

page = st.navigation(PAGES)
problem_sidebar()
page.run()
