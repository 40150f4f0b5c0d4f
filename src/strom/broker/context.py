"""What a handler knows about the request it is answering."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from strom.base import limits
from strom.security.principal import ANONYMOUS, KafkaPrincipal

if TYPE_CHECKING:
    from strom.broker.state import BrokerState
    from strom.security.sasl import SaslAuthenticator


class RequestContext(NamedTuple):
    """Immutable, and made once per request: a named tuple costs a tenth of a frozen dataclass."""

    broker: BrokerState
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    client_host: str
    connection_id: int
    # Bytes the answer may carry at most where the handler can choose (Fetch): what is left of the
    # connection's and the broker's budget for unsent answers.
    response_bytes_max: int = limits.connection_unsent_bytes_max
    # The listener the request came through: Metadata and FindCoordinator answer its advertised address.
    listener: str = "PLAINTEXT"
    # Who the connection authenticated as (SASL, or a TLS client certificate); ACLs and quotas ask.
    principal: KafkaPrincipal = ANONYMOUS
    # The connection's SASL state on a SASL_PLAINTEXT or SASL_SSL listener (SaslHandshake and
    # SaslAuthenticate drive it); None on PLAINTEXT and SSL listeners.
    sasl: SaslAuthenticator | None = None
