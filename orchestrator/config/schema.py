"""The JSON Schema of the sweep YAML (``sweep schema``), for editors that check and complete it.

Generated from what validates a sweep: :class:`~orchestrator.config.spec.SweepSpec` and the trainer
settings' own field metadata.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from trainers import CUDA_METRICS, EPOCH_METRICS, setting_fields, setting_kind

from .spec import SweepSpec

JSON_TYPES = {"bool": "boolean", "int": "integer", "float": "number", "str": "string",
              "dict": "object", "list": "array"}


def json_schema() -> dict[str, Any]:
    """The JSON Schema (draft-07: what VS Code's YAML extension reads) of a sweep YAML, for
    editors (``sweep schema``).

    Generated from what validates a sweep: the top-level pydantic models, and for ``train`` and
    ``space`` the trainer settings' own field metadata (type, choices, help, fixed-only), with the
    search space rules of :mod:`orchestrator.config.space`.
    :func:`orchestrator.config.spec.validate` stays the authority: it checks what a schema cannot
    say (values of settings together, grid sizes, sampler options).
    """
    schema = SweepSpec.model_json_schema(ref_template="#/definitions/{model}")
    # SweepSpec's own title and docstring are for Python readers; the schema has its own below
    del schema["title"], schema["description"]
    defs = schema["definitions"] = schema.pop("$defs")
    # the metrics the trainer logs, which are all there are unless train.metrics adds yours
    # (their names are known only once your functions run: then the validator checks them)
    names = [*EPOCH_METRICS, *CUDA_METRICS]
    for model in ("Objective", "Constraint"):
        defs[model]["properties"]["metric"]["examples"] = names
    named = {"type": "object", "properties": {"metric": {"enum": names}}}
    schema["if"] = {"not": {"required": ["train"], "properties": {"train": {
        "required": ["metrics"], "properties": {"metrics": {"minItems": 1}}}}}}
    schema["then"] = {"properties": {
        "objective": {"anyOf": [named, {"type": "array", "items": named}]},
        "constraints": {"items": named}}}
    fields = {name: f for name, f in setting_fields().items() if name != "seed"}  # top-level seed
    defs["train"] = {"type": "object", "additionalProperties": False,
                     "description": "fixed trainer settings",
                     "properties": {name: _setting_schema(f) for name, f in fields.items()}}
    searched = {name: f for name, f in fields.items()  # *_args: searched under their option
                if not f.metadata["fixed_only"] and setting_kind(name) != "dict"}
    defs["space"] = {"type": "object", "additionalProperties": False,
                     "description": "searched trainer settings: a value is fixed, a list is a "
                                    "choice, {low, high, log, step, type} a range, a mapping "
                                    "of named options a choice with a sub-space per option",
                     "properties": {name: _searched_schema(f) for name, f in searched.items()}}
    for key in ("train", "space"):
        schema["properties"][key] = {"$ref": f"#/definitions/{key}", "default": {},
                                     "description": defs[key]["description"]}
    schema["properties"]["gpus"]["anyOf"][0]["uniqueItems"] = True  # a GPU id once
    schema["properties"]["export"]["uniqueItems"] = True  # a format once
    # "_TopLevel": the title every schema written so far carries (the name of the model it was
    # first generated from), kept so that regenerating a committed schema file changes nothing
    return {"$schema": "http://json-schema.org/draft-07/schema#", "title": "_TopLevel",
            "description": "A sweep YAML for `sweep run`; `sweep validate FILE` also checks "
                           "what a schema cannot (settings together, grid sizes)", **schema}


def _setting_schema(f) -> dict[str, Any]:
    """One trainer setting's value: its type (null if optional), choices, help and default."""
    from trainers.settings import DEVICE, USER_CODE

    value: dict[str, Any] = {"type": JSON_TYPES[setting_kind(f.name)]}
    choices = f.metadata.get("choices")
    if setting_kind(f.name) == "dict":  # a user seam's keywords
        value["propertyNames"] = {"pattern": r"^[A-Za-z_]\w*$"}
    elif setting_kind(f.name) == "list":  # metrics: module:function names
        value.update(items={"type": "string", "pattern": USER_CODE.pattern}, uniqueItems=True)
    elif choices is None and f.metadata.get("user_code"):  # step: module:function
        value["pattern"] = USER_CODE.pattern
    if choices is not None:
        value = {"enum": list(choices)}
        if f.metadata.get("user_code"):  # module:function, torchvision:NAME
            value = {"anyOf": [value, {"type": "string", "pattern": USER_CODE.pattern}]}
    elif f.name == "device":
        value["pattern"] = DEVICE.pattern
    if "None" in str(f.type):
        value = {"anyOf": [value, {"type": "null"}]}
    unit = f" ({f.metadata['unit']})" if f.metadata.get("unit") else ""
    default = f.default_factory() if f.default is dataclasses.MISSING else f.default
    return {**value, "description": f"{f.metadata['help']}{unit}", "default": default}


def _searched_schema(f) -> dict[str, Any]:
    """One setting under ``space``: fixed, a list of choices, a range or named options."""
    fixed = _setting_schema(f)
    forms = [fixed, {"type": "array", "minItems": 1, "items": fixed}]
    if setting_kind(f.name) in ("int", "float"):
        number = {"type": "number"}
        forms.append({"type": "object", "required": ["low", "high"],
                      "additionalProperties": False,
                      "properties": {"low": number, "high": number, "log": {"type": "boolean"},
                                     "step": {"type": "number", "exclusiveMinimum": 0},
                                     "type": {"enum": ["int", "float"]}}})
    if f.metadata.get("choices") or f.metadata.get("user_code"):
        from trainers.settings import USER_CODE

        sub_space = {"allOf": [{"$ref": "#/definitions/space"}, {"not": {"required": [f.name]}}]}
        options = {"type": "object", "minProperties": 1,
                   "propertyNames": {"enum": list(f.metadata["choices"] or ())},
                   "additionalProperties": {"anyOf": [{"type": "null"}, sub_space]}}
        if f.metadata.get("user_code"):  # module:function options: settings or its keywords
            options["propertyNames"] = {"anyOf": [options["propertyNames"],
                                                  {"pattern": USER_CODE.pattern}]}
            options["patternProperties"] = {USER_CODE.pattern: {"type": ["object", "null"]}}
        forms.append(options)
    return {"anyOf": forms, "description": fixed["description"]}

