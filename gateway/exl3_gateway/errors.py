"""Errors in OpenAI's JSON shape, {"error": {"message", "type", "param", "code"}}, with their HTTP
status, and the mapping from the coordinator's gRPC status codes."""

import grpc


class OpenAIError(Exception):
    def __init__(self, status, message, type_="invalid_request_error", param=None, code=None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type_
        self.param = param
        self.code = code

    def body(self):
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def invalid(message, param=None, code=None):
    """400 invalid_request_error: a value the request may not have."""
    return OpenAIError(400, message, "invalid_request_error", param, code)


def model_not_found(model, served):
    return OpenAIError(404, "The model '%s' does not exist; this server serves '%s'" % (model, served),
                       "invalid_request_error", "model", "model_not_found")


def invalid_api_key():
    return OpenAIError(401, "Incorrect or missing API key: send the header 'Authorization: Bearer <key>'",
                       "invalid_request_error", None, "invalid_api_key")


# gRPC status -> (HTTP status, type, code).
_GRPC_MAP = {
    grpc.StatusCode.INVALID_ARGUMENT: (400, "invalid_request_error", None),
    grpc.StatusCode.OUT_OF_RANGE: (400, "invalid_request_error", None),
    grpc.StatusCode.FAILED_PRECONDITION: (400, "invalid_request_error", None),
    grpc.StatusCode.NOT_FOUND: (404, "invalid_request_error", "not_found"),
    grpc.StatusCode.RESOURCE_EXHAUSTED: (429, "rate_limit_error", "rate_limit_exceeded"),
    grpc.StatusCode.UNAUTHENTICATED: (401, "authentication_error", "backend_unauthenticated"),
    grpc.StatusCode.PERMISSION_DENIED: (403, "permission_error", None),
    grpc.StatusCode.UNAVAILABLE: (503, "server_error", "service_unavailable"),
    grpc.StatusCode.DEADLINE_EXCEEDED: (504, "server_error", "timeout"),
    grpc.StatusCode.CANCELLED: (499, "server_error", "cancelled"),
}


def from_grpc(code, details):
    status, type_, err_code = _GRPC_MAP.get(code, (500, "server_error", "internal_error"))
    name = code.name if code is not None else "UNKNOWN"
    return OpenAIError(status, "%s (coordinator: %s)" % (details or "no details", name), type_, None, err_code)


def from_rpc_error(e):
    """An OpenAIError for a grpc.RpcError (sync or aio)."""
    return from_grpc(e.code(), e.details())


def stream_idle_timeout(seconds):
    return OpenAIError(504, "no output from the coordinator for %g s; the stream was ended" % seconds,
                       "server_error", None, "timeout")
