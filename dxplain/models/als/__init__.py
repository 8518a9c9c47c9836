"""ALS matrix factorisation, one module per idea.

- ``trainer``: ``ALSMF``, the sweeps, their stopping rule and the Newton polish (the objective in its docstring);
- ``losses``: what a part's rows cost (``SquaredRows``, ``BCERows``) and their row passes;
- ``half_steps``: the ``HalfSteps`` protocol, its stopping bound's rule ``BalancedBound``, and ``LocalHalfSteps``
  (both half-steps in this process);
- ``part_half_steps``: ``PartHalfSteps``, the half-steps mapped over the partitioned interactions;
- ``block_half_steps``: ``BlockHalfSteps``, the same with the factors in row-block files where the parts are.
"""
