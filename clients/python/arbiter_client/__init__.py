"""Python client of Arbiter, the reward-serving scheduler, with drop-in reward functions for
verl (`arbiter_client.verl`), TRL (`arbiter_client.trl`) and slime (`arbiter_client.slime`)."""
from .client import ArbiterClient, ItemResult, __version__, step_metrics
from .errors import ArbiterError, ArbiterItemError, ArbiterRequestError, ArbiterUnavailable

__all__ = ["ArbiterClient", "ItemResult", "ArbiterError", "ArbiterItemError",
           "ArbiterRequestError", "ArbiterUnavailable", "__version__", "step_metrics"]
