"""Transformer Glassbox: the Streamlit entry point. Page config, navigation over pages/, nothing else."""

import streamlit as st

st.set_page_config(page_title="Transformer Glassbox", page_icon=":material/visibility:", layout="wide")

PAGES = {
    "Start": [
        st.Page("pages/home.py", title="Home", icon=":material/home:", default=True),
    ],
    "Look inside": [
        st.Page("pages/attention.py", title="Attention", icon=":material/grid_on:", url_path="attention"),
        st.Page("pages/positions.py", title="Positions", icon=":material/linear_scale:", url_path="positions"),
        st.Page("pages/heads.py", title="Heads", icon=":material/hub:", url_path="heads"),
        st.Page("pages/masks.py", title="Masks", icon=":material/visibility_off:", url_path="masks"),
        st.Page("pages/depth.py", title="Depth", icon=":material/layers:", url_path="depth"),
    ],
    "Build": [
        st.Page("pages/train.py", title="Train", icon=":material/model_training:", url_path="train"),
    ],
}

st.navigation(PAGES).run()
