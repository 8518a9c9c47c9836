"""Test metrics of a fitted model: RMSE/MAE (regression) or AUC/log loss (classification), warm and cold."""

from __future__ import annotations

import numpy as np

from ..kernels import gammli as G


def scores(task: str, y: np.ndarray, eta: np.ndarray) -> dict:
    """The task's metrics of predictions η against labels y (RMSE of the probability for classification)."""
    if not len(y):
        return {}
    if task == "regression":
        return {"rmse": float(np.sqrt(np.mean((y - eta) ** 2))), "mae": float(np.mean(np.abs(y - eta)))}
    p = G.sigmoid(eta)
    return {"auc": G.auc(y, eta), "log_loss": G.log_loss(y, eta), "rmse": float(np.sqrt(np.mean((y - p) ** 2)))}


def evaluate_pairs(model, u, i, y) -> dict:
    """Metrics on every test row, and on the cold ones (user or item without training rows)."""
    eta = model.predict(u, i)
    cold = model.cold(u, i)
    main = scores(model.task, y, eta)
    if model.task == "classification":
        main.pop("rmse")
    out = {
        **main,
        "n_test": int(len(y)),
        "n_cold": int(cold.sum()),
        "rmse_cold": scores(model.task, y[cold], eta[cold]).get("rmse"),
    }
    out["warm"] = scores(model.task, y[~cold], eta[~cold])
    out["cold"] = scores(model.task, y[cold], eta[cold])
    return out
