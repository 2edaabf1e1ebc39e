"""API errors: `{"error": code, "detail": text}` with a fitting status; never a stack trace."""
from __future__ import annotations

import json
import logging
from typing import Mapping

from aiohttp import web

from gateway.store import StoreError

log = logging.getLogger("sandgate.api")

# The status for each stable code a service refuses with (services carry codes, never HTTP statuses).
STATUS_OF = {
    "bad_request": 400, "reason_required": 400, "forbidden": 403, "not_found": 404,
    "already_decided": 409, "already_voted": 409, "conflict": 409, "not_local": 409, "session_ended": 409,
    "too_large": 413, "unknown_field": 400, "audit.unavailable": 503, "store_unavailable": 503,
}


class ApiError(Exception):
    def __init__(self, status: int, code: str, detail: str):
        super().__init__(detail)
        self.status, self.code, self.detail = status, code, detail

    @classmethod
    def of(cls, code: str, detail: str) -> "ApiError":
        """The API's answer to a service's refusal `code`."""
        return cls(STATUS_OF.get(code, 400), code, detail)


def error_response(status: int, code: str, detail: str) -> web.Response:
    return web.json_response({"error": code, "detail": detail}, status=status)


def url_problem(path: str, query: Mapping[str, str]) -> str | None:
    """Why a request's decoded path or query cannot be served (a NUL: no id, name or filter holds one, and
    PostgreSQL text cannot), or None."""
    if "\x00" in path:
        return "the path holds a NUL character"
    if any("\x00" in k or "\x00" in v for k, v in query.items()):
        return "the query holds a NUL character"
    return None


@web.middleware
async def errors_middleware(request: web.Request, handler):
    raw = request.raw_path                 # a NUL decodes only from "%00" (or a raw NUL): most requests skip the rest
    problem = url_problem(request.path, request.query) if "%00" in raw or "\x00" in raw else None
    if problem is not None:
        return error_response(400, "bad_request", problem)
    try:
        return await handler(request)
    except ApiError as exc:
        return error_response(exc.status, exc.code, exc.detail)
    except web.HTTPException as exc:
        if exc.status < 400 or exc.content_type == "application/json":
            raise
        return error_response(exc.status, exc.reason.lower().replace(" ", "_"), exc.reason)
    except json.JSONDecodeError:
        return error_response(400, "bad_json", "the request body is not valid JSON")
    except StoreError as exc:
        log.error("store error on %s %s: %s", request.method, request.path, exc)
        return error_response(503, "store_unavailable", "the store is unavailable; try again")
    except Exception:  # noqa: BLE001
        log.exception("internal error on %s %s", request.method, request.path)
        return error_response(500, "internal_error", "internal error")
