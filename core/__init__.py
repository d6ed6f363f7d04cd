"""The Glassbox core: model, hooks, positions, masks, tasks, training and analysis. Never imports streamlit."""
