"""SBQ prototypes: the paper's applications and selection at 10⁶ candidates."""
