"""Kafka's JAAS configuration text (``sasl.jaas.config``), parsed: what PLAIN's users come from.

The text is ``<LoginModule class> <flag> <key>=<value> ... ;`` (several entries may follow one
another), values bare words or double-quoted strings in which ``\\`` escapes the next character.
Kafka's PlainLoginModule takes ``username``/``password`` (the broker's own identity, for
inter-broker connections) and one ``user_<name>="<password>"`` per user who may log in.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
FLAGS = frozenset({"required", "requisite", "sufficient", "optional"})
USER_OPTION_PREFIX = "user_"


class JaasError(ValueError):
    """The text is not a JAAS configuration; the message says where (never a password)."""


@dataclass(frozen=True)
class JaasEntry:
    login_module: str
    flag: str
    options: Mapping[str, str] = field(default_factory=dict)

    def users(self) -> dict[str, str]:
        """PlainLoginModule's ``user_<name>`` options: user name -> password."""
        return {
            key[len(USER_OPTION_PREFIX) :]: value
            for key, value in self.options.items()
            if key.startswith(USER_OPTION_PREFIX) and len(key) > len(USER_OPTION_PREFIX)
        }


def _tokens(text: str) -> list[tuple[str, bool]]:
    """Words, ``=`` and ``;`` as (token, quoted)."""
    tokens: list[tuple[str, bool]] = []
    index = 0
    length = len(text)
    while index < length:
        char = text[index]
        if char.isspace():
            index += 1
        elif char in "=;":
            tokens.append((char, False))
            index += 1
        elif char == '"':
            index += 1
            value: list[str] = []
            while True:
                if index >= length:
                    raise JaasError("a quoted value is not closed")
                char = text[index]
                if char == "\\" and index + 1 < length:
                    value.append(text[index + 1])
                    index += 2
                elif char == '"':
                    index += 1
                    break
                else:
                    value.append(char)
                    index += 1
            tokens.append(("".join(value), True))
        else:
            start = index
            while index < length and not text[index].isspace() and text[index] not in '=;"':
                index += 1
            tokens.append((text[start:index], False))
    return tokens


def parse_jaas_config(text: str) -> list[JaasEntry]:
    """The entries of ``text``; raises JaasError naming what is wrong (values are never quoted back)."""
    tokens = _tokens(text)
    entries: list[JaasEntry] = []
    position = 0

    def take() -> tuple[str, bool]:
        nonlocal position
        if position >= len(tokens):
            raise JaasError("the configuration ends early (every entry ends with ';')")
        token = tokens[position]
        position += 1
        return token

    while position < len(tokens):
        module, quoted = take()
        if quoted or module in ("=", ";"):
            raise JaasError("an entry must start with a login module class name")
        flag, quoted = take()
        if quoted or flag.lower() not in FLAGS:
            raise JaasError(f"{module}: the control flag must be one of {', '.join(sorted(FLAGS))}")
        options: dict[str, str] = {}
        while True:
            key, quoted = take()
            if key == ";" and not quoted:
                break
            if quoted or key == "=":
                raise JaasError(f"{module}: expected an option name")
            equals, quoted = take()
            if equals != "=" or quoted:
                raise JaasError(f"{module}: option {key} has no '=' value")
            value, quoted = take()
            if not quoted and value in ("=", ";"):
                raise JaasError(f"{module}: option {key} has no value")
            if key in options:
                raise JaasError(f"{module}: option {key} is given twice")
            options[key] = value
        entries.append(JaasEntry(module, flag.lower(), options))
    if not entries:
        raise JaasError("no login module is configured")
    return entries


def plain_users(text: str) -> dict[str, str]:
    """The users of the one PlainLoginModule entry ``text`` must hold (Kafka requires exactly one)."""
    entries = parse_jaas_config(text)
    if len(entries) != 1:
        raise JaasError(f"sasl.jaas.config must hold exactly one login module, not {len(entries)}")
    entry = entries[0]
    if entry.login_module != PLAIN_LOGIN_MODULE:
        raise JaasError(f"PLAIN needs {PLAIN_LOGIN_MODULE}, not {entry.login_module}")
    return entry.users()
