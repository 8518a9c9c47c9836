"""Faithfulness: case deletion, the evaluate flow per data set."""
