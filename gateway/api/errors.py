"""API errors: `{"error": code, "detail": text}` with a fitting status; never a stack trace."""
from __future__ import annotations

import json
import logging

from aiohttp import web

log = logging.getLogger("sandgate.api")


class ApiError(Exception):
    def __init__(self, status: int, code: str, detail: str):
        super().__init__(detail)
        self.status, self.code, self.detail = status, code, detail


def error_response(status: int, code: str, detail: str) -> web.Response:
    return web.json_response({"error": code, "detail": detail}, status=status)


@web.middleware
async def errors_middleware(request: web.Request, handler):
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
    except Exception as exc:  # noqa: BLE001
        from gateway.store import StoreError

        if isinstance(exc, StoreError):
            log.error("store error on %s %s: %s", request.method, request.path, exc)
            return error_response(503, "store_unavailable", "the store is unavailable; try again")
        log.exception("internal error on %s %s", request.method, request.path)
        return error_response(500, "internal_error", "internal error")
