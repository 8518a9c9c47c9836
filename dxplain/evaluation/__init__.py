"""Case-deletion evaluation of explainers: retrain without what a method calls important, measure the move.

``deletion`` is the harness (sets, curves, AUC-DEL±), ``faithfulness`` the sparse-model cases and
``faithfulness_cf`` the collaborative-filtering ones; ``report`` writes the Markdown table and the plot.
"""
