"""JSON merge patch (RFC 7386) and JSON patch (RFC 6902) on plain JSON values (F10)."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch

from dispatcher_sandbox.fake_apiserver.errors import ApiError


def merge_patch(target: Any, patch: Any) -> Any:
    """Apply an RFC 7386 merge patch and return a new value; ``null`` removes a member."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result: dict[str, Any] = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def json_patch(target: dict[str, Any], operations: Any) -> dict[str, Any]:
    """Apply an RFC 6902 patch; 400 if the body is not a list, 422 if an operation fails."""
    if not isinstance(operations, list):
        raise ApiError(
            400,
            "json: cannot unmarshal object into Go value of type jsonpatch.Patch "
            "(a JSON patch body must be a list of operations)",
        )
    try:
        result = jsonpatch.apply_patch(target, operations, in_place=False)
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
        raise ApiError(
            422, f"the server rejected our request due to an error in our request: {exc}"
        ) from exc
    except (TypeError, KeyError, ValueError) as exc:
        raise ApiError(400, f"invalid JSON patch: {exc}") from exc
    if not isinstance(result, dict):
        raise ApiError(422, "a JSON patch must leave an object")
    return result
