#!/usr/bin/env python3
"""Validates one custom resource against a CustomResourceDefinition, as the API server would
before storing it (tests/src/crd.rs runs it).

    python3 tests/crds/validate.py CRD.yaml VERSION < object.json

Checks that apiVersion is the CRD's group and the served VERSION, that kind is the CRD's kind,
that metadata.name is a DNS subdomain, and that the object matches the version's
openAPIV3Schema. The structural schema is turned into a JSON Schema for the `jsonschema`
package (installed with kubernetes-validate, which tests/run.sh installs):
  - x-kubernetes-int-or-string becomes anyOf integer/string (a pattern then applies to strings
    only, as in the API server);
  - nullable: true also allows null;
  - an object schema with properties and neither additionalProperties nor
    x-kubernetes-preserve-unknown-fields rejects other fields: the API server would prune
    them, so a field nodemedic writes there would be lost;
  - every other x-kubernetes-* key, description, and format are not checked.

Prints one error a line, `<field path>: <what is wrong>`, with paths in the API server's
style (`zones[0].resources[1].available`). Exit status 0: valid; 1: invalid; 2: could not
check (bad arguments, unreadable CRD, no such version, a missing Python package).
"""

import json
import re
import sys

try:
    import yaml
except ImportError:
    sys.exit("validate.py: PyYAML is missing (python3 -m pip install pyyaml; tests/run.sh installs it)")
try:
    import jsonschema
except ImportError:
    sys.exit("validate.py: jsonschema is missing (it comes with kubernetes-validate; tests/run.sh installs it)")

DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")

# The pattern Kubernetes puts on resource.Quantity fields, to name it in messages.
QUANTITY_HINT = "a quantity such as 8, 500m or 1Gi"


def to_json_schema(s):
    """A JSON Schema (draft 7) for one structural schema node."""
    if not isinstance(s, dict):
        return s
    out = {}
    for key, value in s.items():
        if key in ("properties", "patternProperties", "definitions"):
            out[key] = {k: to_json_schema(v) for k, v in value.items()}
        elif key in ("items", "additionalProperties", "not"):
            out[key] = to_json_schema(value)
        elif key in ("anyOf", "allOf", "oneOf"):
            out[key] = [to_json_schema(v) for v in value]
        elif key.startswith("x-kubernetes-") or key in ("nullable", "description", "format", "example", "externalDocs"):
            continue
        else:
            out[key] = value
    if s.get("x-kubernetes-int-or-string") and "anyOf" not in s:
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if s.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    if (
        "properties" in s
        and "additionalProperties" not in s
        and not s.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def field_path(parts):
    """`zones[0].resources[1].available` from jsonschema's deque of keys and indexes."""
    text = ""
    for p in parts:
        if isinstance(p, int):
            text += f"[{p}]"
        else:
            text += ("." if text else "") + str(p)
    return text or "<root>"


def join(path, key):
    return key if path == "<root>" else f"{path}.{key}"


def shown(value):
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


JSON_TYPES = [
    (bool, "boolean"),
    (int, "integer"),
    (float, "number"),
    (str, "string"),
    (list, "array"),
    (dict, "object"),
    (type(None), "null"),
]


def json_type(value):
    for t, name in JSON_TYPES:
        if isinstance(value, t):
            return name
    return type(value).__name__


def messages(error):
    """The lines for one jsonschema error (anyOf errors are explained by their branches)."""
    path = field_path(error.absolute_path)
    v = error.validator
    if v == "required":
        return [
            f"{join(path, name)}: Required value"
            for name in error.validator_value
            if isinstance(error.instance, dict) and name not in error.instance
        ]
    if v == "additionalProperties":
        extra = sorted(k for k in error.instance if k not in error.schema.get("properties", {}))
        return [f"{join(path, k)}: unknown field (the API server would prune it)" for k in extra]
    if v == "type":
        want = error.validator_value
        want = " or ".join(want) if isinstance(want, list) else want
        return [f"{path}: Invalid value: {shown(error.instance)}: must be of type {want}, not {json_type(error.instance)}"]
    if v == "pattern":
        what = QUANTITY_HINT if "[KMGTPE]i" in error.validator_value else f"a string matching {error.validator_value}"
        return [f"{path}: Invalid value: {shown(error.instance)}: must be {what}"]
    if v == "anyOf":
        # A wrong type in every branch: say which types would do. Otherwise the branch whose
        # type fits explains what is wrong with the value.
        branches = [c for c in error.context if c.validator != "type"]
        if branches:
            return [m for c in branches for m in messages(c)]
        types = [b.get("type") for b in error.validator_value if isinstance(b, dict) and "type" in b]
        return [
            f"{path}: Invalid value: {shown(error.instance)}: must be of type {' or '.join(types)}, not {json_type(error.instance)}"
        ]
    if v == "enum":
        allowed = ", ".join(json.dumps(x) for x in error.validator_value)
        return [f"{path}: Unsupported value: {shown(error.instance)}: supported values: {allowed}"]
    return [f"{path}: {error.message}"]


def main():
    if len(sys.argv) != 3:
        print("usage: validate.py CRD.yaml VERSION < object.json", file=sys.stderr)
        return 2
    crd_file, version = sys.argv[1], sys.argv[2]
    with open(crd_file, encoding="utf-8") as f:
        crds = [d for d in yaml.safe_load_all(f) if d and d.get("kind") == "CustomResourceDefinition"]
    if len(crds) != 1:
        print(f"{crd_file}: expected one CustomResourceDefinition, found {len(crds)}", file=sys.stderr)
        return 2
    spec = crds[0]["spec"]
    served = [v for v in spec.get("versions", []) if v.get("name") == version and v.get("served")]
    if not served:
        print(f"{crd_file}: the CRD serves no version {version}", file=sys.stderr)
        return 2
    schema = served[0].get("schema", {}).get("openAPIV3Schema")
    if not isinstance(schema, dict):
        print(f"{crd_file}: version {version} has no openAPIV3Schema", file=sys.stderr)
        return 2
    try:
        obj = json.load(sys.stdin)
    except ValueError as e:
        print(f"the object is not JSON: {e}", file=sys.stderr)
        return 2

    errors = []
    if not isinstance(obj, dict):
        errors.append(f"<root>: Invalid value: {shown(obj)}: must be of type object, not {json_type(obj)}")
    else:
        want_api_version = f"{spec['group']}/{version}"
        if obj.get("apiVersion") != want_api_version:
            errors.append(f"apiVersion: Invalid value: {shown(obj.get('apiVersion'))}: must be {want_api_version}")
        if obj.get("kind") != spec["names"]["kind"]:
            errors.append(f"kind: Invalid value: {shown(obj.get('kind'))}: must be {spec['names']['kind']}")
        meta = obj.get("metadata")
        name = meta.get("name") if isinstance(meta, dict) else None
        if not isinstance(meta, dict):
            errors.append("metadata.name: Required value")
        elif not isinstance(name, str) or not name:
            if not meta.get("generateName"):
                errors.append("metadata.name: Required value: name or generateName is required")
        elif len(name) > 253 or not DNS_SUBDOMAIN.match(name):
            errors.append(
                f"metadata.name: Invalid value: {shown(name)}: must be a lowercase RFC 1123 subdomain of at most 253 characters"
            )
        validator = jsonschema.Draft7Validator(to_json_schema(schema))
        found = sorted(
            validator.iter_errors(obj),
            key=lambda e: [(0, p, "") if isinstance(p, int) else (1, 0, str(p)) for p in e.absolute_path],
        )
        for e in found:
            errors.extend(messages(e))

    for line in dict.fromkeys(errors):
        print(line)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
