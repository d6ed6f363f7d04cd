"""Analyses that know models (but not figures): what the pages compute before they draw."""
