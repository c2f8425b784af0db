"""The env server's errors and the HTTP answers they become.

Every refusal is one JSON object ``{"detail": "...", "error": "<kind>"}`` with a
status that says what to do about it:

* 401 ``unauthorized``: no or a wrong bearer token;
* 404 ``unknown_session`` / ``unknown_env``: no such group or env session (never made,
  closed, or dropped after its idle timeout: the message says which), or an
  environment this server does not host;
* 409 ``finished`` / ``out_of_order`` / ``fork_unsupported``: the episode is over
  (or closed), a step's ``turn`` is not the next one, or the env cannot fork;
* 422 ``bad_request``: a field is wrong (its dotted name leads the message);
* 429 ``too_many_sessions``: the server holds as many groups as it may; try later;
* 500 ``env_error``: the environment's own code raised; the answer names the error
  type and says whether it is transient (the client then raises a
  :class:`~agentenvs.envs.errors.TransientError`, and the collector retries).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response

from agentenvs.envs.errors import AgentEnvsError, is_transient
from agentenvs.envs.serving.wire import dumps


class ServingError(AgentEnvsError):
    """A refusal of the env server; ``status`` and ``kind`` are what the client sees."""

    status: int = 400
    kind: str = "bad_request"

    def payload(self) -> dict[str, Any]:
        return {"detail": str(self), "error": self.kind}


class BadRequest(ServingError, ValueError):
    status, kind = 422, "bad_request"


class UnknownSession(ServingError, KeyError):
    status, kind = 404, "unknown_session"

    def __str__(self) -> str:
        return str(self.args[0])


class UnknownServedEnv(ServingError, KeyError):
    status, kind = 404, "unknown_env"

    def __str__(self) -> str:
        return str(self.args[0])


class EpisodeFinished(ServingError, RuntimeError):
    status, kind = 409, "finished"


class OutOfOrder(ServingError, RuntimeError):
    status, kind = 409, "out_of_order"


class ForkRefused(ServingError, RuntimeError):
    status, kind = 409, "fork_unsupported"


class TooManySessions(ServingError, RuntimeError):
    status, kind = 429, "too_many_sessions"


class EnvCodeError(ServingError, RuntimeError):
    """The hosted environment raised; the original error is named, not hidden."""

    status, kind = 500, "env_error"

    def __init__(self, error: BaseException, where: str) -> None:
        super().__init__(f"{type(error).__name__}: {error}".rstrip(": "))
        self.error_type = type(error).__name__
        self.where = where
        self.transient = is_transient(error)

    def payload(self) -> dict[str, Any]:
        return {
            **super().payload(),
            "error_type": self.error_type,
            "where": self.where,
            "transient": self.transient,
        }


def _json(status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> Response:
    return Response(dumps(payload), status_code=status, media_type="application/json",
                    headers=headers)  # fmt: skip


def validation_message(errors: list[dict[str, Any]]) -> str:
    """``body.group_size: Input should be ...; body.action: Field required``."""
    parts = []
    for error in errors:
        where = ".".join(str(p) for p in error.get("loc", ())) or "body"
        parts.append(f"{where}: {error.get('msg', 'invalid')}")
    return "; ".join(parts) or "invalid request"


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ServingError)
    async def serving_error(_: Request, error: ServingError) -> Response:
        return _json(error.status, error.payload())

    @app.exception_handler(RequestValidationError)
    async def bad_body(_: Request, error: RequestValidationError) -> Response:
        errors = list(error.errors())
        fields = [".".join(str(p) for p in e.get("loc", ())) for e in errors]
        payload = {"detail": validation_message(errors), "error": "bad_request", "fields": fields}
        return _json(422, payload)


def unauthorized() -> Response:
    return _json(
        401,
        {"detail": "missing or wrong bearer token (Authorization: Bearer ...)",
         "error": "unauthorized"},
        headers={"WWW-Authenticate": "Bearer"},
    )  # fmt: skip
