"""Figure builders: arrays in, plotly/altair figures out. Pure functions, no models, no streamlit."""
