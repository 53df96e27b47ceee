"""What step kinds accept and produce, from their models: `trtflow steps` and `trtflow schema`.

The recipe JSON Schema is the document model with each step's `with:` tied to its kind through
`if uses == KIND then with: <Params schema>`, which yaml-language-server and VS Code understand.
Every param also accepts a `${...}` reference string, since any value may be one, and numbers and
booleans accept the strings the loader reads as such.
"""

from __future__ import annotations

from typing import Any

from pydantic.json_schema import GenerateJsonSchema

from trtflow.schema.recipe import RecipeDocument
from trtflow.steps import registry
from trtflow.steps.base import Step

_REFERENCE_SCHEMA = {
    "type": "string",
    "pattern": r"\$\{[^}]+\}",
    "description": "A ${vars...}, ${steps...} or ${matrix...} reference.",
}
# The strings pydantic reads as a number, an integer or a boolean (`1e-2`, `1_000`, `yes`)
_BOOLEAN_WORDS = ("0", "1", "t", "f", "y", "n", "true", "false", "yes", "no", "on", "off")
_SCALAR_TEXT = {
    "number": {
        "type": "string",
        "pattern": r"^\s*[-+]?((\d[\d_]*(\.[\d_]*)?|\.\d[\d_]*)([eE][-+]?\d+)?|[Ii]nf(inity)?|[Nn]a[Nn])\s*$",
    },
    "integer": {"type": "string", "pattern": r"^\s*[-+]?\d[\d_]*(\.0*)?\s*$"},
    "boolean": {
        "enum": sorted(
            {form for word in _BOOLEAN_WORDS for form in (word, word.capitalize(), word.upper())}
        )
        + [0, 1]
    },
}


class _WithFactoryDefaults(GenerateJsonSchema):
    """Also show defaults made by a `default_factory` (`[]`, `{}`), which pydantic leaves out of
    schemas: without them `trtflow steps KIND` says `default null` for a list that defaults to empty."""

    def get_default_value(self, schema):
        if "default_factory" in schema and not schema.get("default_factory_takes_data"):
            return schema["default_factory"]()
        return super().get_default_value(schema)


def _type_name(schema: dict, definitions: dict) -> str:
    if "$ref" in schema:
        return schema["$ref"].rsplit("/", 1)[-1]
    if "anyOf" in schema:
        return " | ".join(_type_name(s, definitions) for s in schema["anyOf"])
    if "enum" in schema:
        return " | ".join(map(str, schema["enum"]))
    if "const" in schema:
        return str(schema["const"])
    if schema.get("type") == "array":
        return f"list[{_type_name(schema.get('items', {}), definitions)}]"
    if schema.get("format") == "path":
        return "path"
    return str(schema.get("type", "any"))


def _nested_models(schema: dict, definitions: dict) -> list[tuple[str, dict]]:
    """(label, object schema) for each model a param holds: `check` may be `Tolerances` or
    `CommandCheck`; `runners` is a list of one config per backend."""
    if "properties" in schema:  # a model inline, as in a model's own anyOf of input forms
        return [(str(schema.get("title", "?")), schema)]
    if "$ref" in schema:
        target = definitions.get(schema["$ref"].rsplit("/", 1)[-1], {})
        if (
            "anyOf" in target
        ):  # a model that also accepts a shorthand (LoaderSpec: `script.py:function`)
            return _nested_models(target, definitions)
        # a discriminated member is named by its tag (`onnxruntime`), others by their title
        tag = next(
            (p["const"] for p in target.get("properties", {}).values() if "const" in p), None
        )
        return [(str(tag or target.get("title", "?")), target)] if "properties" in target else []
    if "anyOf" in schema or "oneOf" in schema:
        return [
            found
            for option in schema.get("anyOf", schema.get("oneOf", []))
            for found in _nested_models(option, definitions)
        ]
    if schema.get("type") == "array":
        return [
            (f"[] {label}", target)
            for label, target in _nested_models(schema.get("items", {}), definitions)
        ]
    return []


def _param_rows(
    schema: dict, definitions: dict, prefix: str = "", depth: int = 0
) -> list[dict[str, Any]]:
    """One row per key, nested models' keys included as `parent.key` (`check.atol`, `data.seed`)."""
    rows = []
    required = set(schema.get("required", []))
    for name, field_schema in schema.get("properties", {}).items():
        nested = _nested_models(field_schema, definitions) if depth < 2 else []
        rows.append(
            {
                "name": prefix + name,
                "type": _type_name(field_schema, definitions),
                "required": name in required,
                "default": field_schema.get("default"),
                "description": field_schema.get("description", ""),
            }
        )
        for label, target in nested:
            array = label.startswith("[] ")
            model_name = label.removeprefix("[] ")
            tag = f" ({model_name})" if len(nested) > 1 else ""
            rows += _param_rows(
                target, definitions, f"{prefix}{name}{'[]' if array else ''}{tag}.", depth + 1
            )
    return rows


def describe(kind: str) -> dict[str, Any]:
    """A step kind's params (name, type, default, description), nested keys included, and outputs."""
    step: type[Step] = registry.get(kind)
    schema = step.Params.model_json_schema(by_alias=True, schema_generator=_WithFactoryDefaults)
    params = _param_rows(schema, schema.get("$defs", {}))
    outputs = [
        {
            "name": name,
            "kind": output.kind + (f" ({output.suffix})" if output.suffix else ""),
            "description": output.description,
        }
        for name, output in step.outputs.items()
    ]
    return {
        "kind": kind,
        "summary": step.summary or (step.__doc__ or "").strip().split("\n")[0],
        "version": step.version,
        "params": params,
        "outputs": outputs,
    }


def _loader_forms(schema: dict[str, Any], references: bool) -> dict[str, Any]:
    """`schema` widened to every form the recipe loader accepts, at any depth.

    - pydantic reads numbers and booleans from strings, and PyYAML leaves `1e-2` (an exponent without
      a dot) a string, so a number or boolean also accepts its text: `atol: 1e-2` is valid.
    - With `references`, every value position (property, list item, tuple member, map value) also
      accepts a `${...}` string: `check: {atol: "${vars.atol}"}` is valid.
    - `oneOf` becomes `anyOf`: a `${...}` string matches every member of a tagged union.
    """

    def value(member: dict[str, Any]) -> dict[str, Any]:
        member = _loader_forms(member, references)
        if not references:
            return member
        described = {"description": member["description"]} if "description" in member else {}
        return {"anyOf": [member, _REFERENCE_SCHEMA], **described}

    result: dict[str, Any] = {}
    for key, member in schema.items():
        if key == "properties":
            result[key] = {name: value(item) for name, item in member.items()}
        elif key == "$defs":
            result[key] = {name: _loader_forms(item, references) for name, item in member.items()}
        elif key in ("items", "additionalProperties") and isinstance(member, dict):
            result[key] = value(member)
        elif key == "prefixItems":
            result[key] = [value(item) for item in member]
        elif key in ("anyOf", "oneOf", "allOf"):
            result["allOf" if key == "allOf" else "anyOf"] = [
                _loader_forms(item, references) for item in member
            ]
        else:
            result[key] = member
    if result.get("type") in _SCALAR_TEXT:
        described = {"description": result["description"]} if "description" in result else {}
        return {"anyOf": [result, _SCALAR_TEXT[result["type"]]], **described}
    return result


def recipe_json_schema() -> dict[str, Any]:
    """The JSON Schema (Draft 2020-12) of recipes: it accepts every recipe the loader accepts."""
    schema = _loader_forms(RecipeDocument.model_json_schema(by_alias=True), references=False)
    definitions = schema.setdefault("$defs", {})
    conditions = []
    for kind in registry.kinds():
        params_schema = _loader_forms(
            registry.get(kind).Params.model_json_schema(
                by_alias=True, ref_template="#/$defs/{model}"
            ),
            references=True,
        )
        definitions.update(params_schema.pop("$defs", {}))
        definitions[f"with:{kind}"] = params_schema
        conditions.append(
            {
                "if": {"properties": {"uses": {"const": kind}}, "required": ["uses"]},
                "then": {"properties": {"with": {"$ref": f"#/$defs/with:{kind}"}}},
            }
        )
    step_spec = definitions["StepSpec"]
    step_spec["properties"]["uses"]["enum"] = registry.kinds()
    step_spec["allOf"] = conditions
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "trtflow recipe"
    return schema
