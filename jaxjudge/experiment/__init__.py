"""Experiment: configs, their checks and plans, and the extraction jobs they run."""
