"""Security's pure cores: principals, SASL mechanisms (PLAIN, SCRAM), the ACL authorizer and client
quotas. No sockets and no asyncio here: bytes and requests go in, decisions come out; the broker
(``strom.broker``) and the client (``strom.client``) are the shells around them."""
