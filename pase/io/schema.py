"""JSON Schemas of pase's file formats, generated from the code that reads them.

``python -m pase.io.schema`` prints the graph format's schema;
``docs/graph.schema.json`` is its output, and a test keeps the two equal.
"""

from __future__ import annotations

import json

from pase.io.graph_json import FORMAT, VERSION
from pase.limits import MAX_LAYER_INPUTS, MAX_LAYERS, MAX_RANK
from pase.ops.registry import OPS

__all__ = ["graph_schema"]


def graph_schema() -> dict:
    """The JSON Schema (draft 2020-12) of the graph format, assembled from every op's ``params_schema``.

    ``docs/graph.schema.json`` is this, written by ``python -m pase.io.schema``.
    The schema checks structure and types; values (sizes positive, shapes that
    agree along an edge) are checked when the file is loaded.
    """
    slot = {"oneOf": [
        {"type": "null"},
        {"type": "string"},
        {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer", "minimum": 0}],
         "minItems": 2, "maxItems": 2},
    ]}
    layer = {
        "type": "object",
        "required": ["name", "op", "params"],
        "properties": {
            "name": {"type": "string", "minLength": 1},
            "op": {"enum": list(OPS)},
            "params": {"type": "object"},
            "inputs": {"type": "array", "maxItems": MAX_LAYER_INPUTS, "items": slot},
            "tied": {"description": "weight name -> name of the parameter it shares (counted once)",
                     "type": "object", "additionalProperties": {"type": "string", "minLength": 1}},
            "extra_weights": {
                "description": "weights beyond those the op's builder makes (trainable tensors read outside a "
                               "weight slot: a position table, a class token)",
                "type": "array", "maxItems": MAX_LAYER_INPUTS,
                "items": {
                    "type": "object", "required": ["name", "shape", "axes"],
                    "properties": {
                        "name": {"type": "string", "minLength": 1},
                        "shape": {"type": "array", "maxItems": MAX_RANK, "items": {"type": "integer", "minimum": 1}},
                        "axes": {"type": "array", "maxItems": MAX_RANK,
                                 "items": {"oneOf": [{"type": "null"}, {"type": "string"}]},
                                 "description": "per axis, the layer dimension it is split along, or null"},
                        "tied": {"type": "string",
                                 "description": "name of the parameter it shares (counted once); empty: its own"},
                    },
                },
            },
        },
        "allOf": [{"if": {"properties": {"op": {"const": name}}},
                   "then": {"properties": {"params": spec.params_schema()}}} for name, spec in OPS.items()],
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "pase graph file",
        "description": "A computation graph for pase (docs/graph-format.md); generated from pase.ops.",
        "type": "object",
        "required": ["format", "version", "layers"],
        "properties": {
            "format": {"const": FORMAT},
            "version": {"const": VERSION},
            "name": {"type": "string"},
            "layers": {"type": "array", "minItems": 1, "maxItems": MAX_LAYERS, "items": layer},
        },
    }


if __name__ == "__main__":
    print(json.dumps(graph_schema(), indent=1))
