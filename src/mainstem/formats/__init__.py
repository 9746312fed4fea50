"""Stored message formats and the conversions other protocols need to read them."""

from mainstem.formats.amqp091_mapping import from_amqp091, to_amqp091
from mainstem.formats.amqp10 import (
    Amqp10DecodeError,
    Amqp10EncodeError,
    BodyKind,
    Header,
    Message,
    Properties,
    decode_message,
    encode_message,
    message_body,
)

__all__ = [
    "Amqp10DecodeError",
    "Amqp10EncodeError",
    "BodyKind",
    "Header",
    "Message",
    "Properties",
    "decode_message",
    "encode_message",
    "from_amqp091",
    "message_body",
    "to_amqp091",
]
