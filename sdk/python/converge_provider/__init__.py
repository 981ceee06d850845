"""converge_provider: the Python SDK for Converge provider endpoints (docs/protocol.md).

Write a kind's reaction as a Provider and serve it over HTTP with ``serve`` or on AWS
Lambda with ``converge_provider.lambda_handler.LambdaHandler``; signing, deduplication,
inline and asynchronous answers, callbacks, heartbeats, batches and thin payloads are the
SDK's. Standard library only.
"""

from ._context import Cancelled, Context, DeadlineExceeded, Finished, Shutdown, Superseded, TerminalError
from ._endpoint import (
    MODE_EVENT,
    MODE_HTTP,
    MODE_SYNC,
    Endpoint,
    FuncProvider,
    Options,
    Provider,
    Response,
    heartbeat_url,
    provider,
)
from ._http import HTTPClient, HTTPRequest, HTTPResponse, urllib_client
from ._server import Server, serve
from ._signature import SignatureError, generate_secret, sign, signed_headers
from ._wire import (
    Child,
    Condition,
    Config,
    Edge,
    KindVersion,
    Operation,
    Outcome,
    ProviderConfig,
    Ref,
    Request,
    Resource,
    ValueFlow,
    merge_config,
)

#: The protocol version this SDK speaks (docs/protocol.md; the Lambda event's "converge.v1").
__version__ = "1.0.0"

__all__ = [
    "Cancelled", "Child", "Condition", "Config", "Context", "DeadlineExceeded", "Edge", "Endpoint",
    "Finished", "FuncProvider", "HTTPClient", "HTTPRequest", "HTTPResponse", "KindVersion", "MODE_EVENT",
    "MODE_HTTP", "MODE_SYNC", "Operation", "Options", "Outcome", "Provider", "ProviderConfig", "Ref",
    "Request", "Resource", "Response", "Server", "Shutdown", "SignatureError", "Superseded",
    "TerminalError", "ValueFlow", "generate_secret", "heartbeat_url", "merge_config", "provider", "serve", "sign",
    "signed_headers", "urllib_client",
]
