"""Trainable models returning factors or parameters."""
