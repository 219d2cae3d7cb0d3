"""The training recipe of the shipped mini models (``recipe.json`` beside this module) and the default output
folder of ``mini train``: light to import, so the command line can show the recipe's values in its help."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RECIPE_FILE = Path(__file__).with_name("recipe.json")
DEFAULT_OUT = "mini-models"  # relative to the working directory: never the installed package by default


def _settings(node: Any) -> Any:
    """``node`` without its ``_about`` notes, at any depth."""
    if isinstance(node, dict):
        return {k: _settings(v) for k, v in node.items() if k != "_about"}
    if isinstance(node, list):
        return [_settings(v) for v in node]
    return node


def load_recipe(path: str | Path = RECIPE_FILE) -> dict[str, Any]:
    """The training recipe: the first round's hyperparameters of each stage (``mlm``, ``nli``, ``t5``), the further
    rounds that continue from it (``mlm_more_rounds``, ``nli_more_rounds``, ``t5_more_rounds``: each round's keys
    override the first round's) and the tokenizer vocabulary sizes; the ``_about`` notes left out."""
    return _settings(json.loads(Path(path).read_text(encoding="utf-8")))
