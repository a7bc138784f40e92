"""Flows by name, and ``r1``: the one flow a deployment serves (flow name, recipe file, overrides).

The stage flows take a typed recipe object; a deployment's parameters are JSON typed in a UI or
on a command line, so the deployed entry point takes what the CLI takes and resolves the recipe
on the worker, with the same errors for unknown keys.
"""

from __future__ import annotations

from collections.abc import Callable

from prefect import flow


def flow_for(name: str) -> Callable[..., str]:
    """The flow function for a CLI / deployment flow name (:data:`flows.registry.FLOWS`)."""
    from flows.registry import flow_spec

    return flow_spec(name).flow()


@flow(name="r1", log_prints=False)
def r1(flow: str = "r1-zero", recipe: str | None = None, overrides: list[str] | None = None) -> str:
    """Run a recipe as ``r1 run FLOW [--recipe RECIPE] [OVERRIDES...]`` does; return its result path.

    Whoever can start a deployment run chooses its parameters, and a ``module:function`` reward
    imports code: here only registry rewards and the modules the worker's operator allows in
    ``R1_ALLOW_REWARD_MODULES`` (comma-separated, or ``*`` for any) are accepted.
    """
    from flows import recipes
    from r1.rewards import allowed_reward_modules

    loaded = recipes.load(flow, recipe, overrides or [], allow_reward_modules=allowed_reward_modules())
    return flow_for(flow)(loaded)
