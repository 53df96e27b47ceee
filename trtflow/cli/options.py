"""The options several commands share, as typer parses them."""

from __future__ import annotations

import typer

RecipeArg = typer.Argument(
    ..., metavar="RECIPE", help="The recipe file (YAML).", show_default=False
)
SetOption = typer.Option(
    [],
    "--set",
    metavar="NAME=VALUE",
    help=(
        "Override a var: NAME=VALUE replaces it whole (a mapping var too), NAME.KEY=VALUE sets one key of a mapping "
        "var and keeps the others; or any step value: steps.ID.with.KEY=VALUE. VALUE is YAML."
    ),
)
WorkspaceOption = typer.Option(
    None,
    "--workspace",
    metavar="DIR",
    help="Cache folder [default: .trtflow/ next to the recipe, or $TRTFLOW_WORKSPACE].",
)
DebugOption = typer.Option(False, "--debug", help="Show Python tracebacks.")
RemoteOption = typer.Option(
    None,
    "--remote",
    metavar="URL|NAME",
    help=(
        "Shared cache (file://, s3://, gs://, az://, or a name from `trtflow remote add`) [default: $TRTFLOW_REMOTE, "
        "else the workspace's default remote]."
    ),
)
CacheRecipeOption = typer.Option(
    None, "--recipe", metavar="RECIPE", help="Use the workspace of this recipe."
)
