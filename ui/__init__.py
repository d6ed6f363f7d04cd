"""Streamlit helpers shared by the pages: the sidebar, model loading, cached runs, URL state.

Lives beside core/ (which never imports streamlit) and is not listed by st.navigation.
"""
