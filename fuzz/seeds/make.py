#!/usr/bin/env python3
"""Writes the seed corpus of each fuzz target under fuzz/seeds/<target>/ (run from anywhere)."""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def frame(kind, ch, payload):
    return bytes([kind]) + struct.pack(">HI", ch, len(payload)) + payload + b"\xce"


def short(s):
    return bytes([len(s)]) + s


def long(s):
    return struct.pack(">I", len(s)) + s


def method(ch, cls, mid, args=b""):
    return frame(1, ch, struct.pack(">HH", cls, mid) + args)


def table(entries):
    body = b"".join(short(k) + v for k, v in entries)
    return struct.pack(">I", len(body)) + body


SAMPLE_TABLE = table([
    (b"x-max-length", b"I" + struct.pack(">i", 10)),
    (b"x-message-ttl", b"l" + struct.pack(">q", 60000)),
    (b"s", b"S" + long(b"text")),
    (b"flag", b"t\x01"),
    (b"arr", b"A" + struct.pack(">I", 7) + b"b\x01" + b"u\x00\x02" + b"V" + b"B\x09"),
    (b"nested", b"F" + table([(b"d", b"D\x02" + struct.pack(">I", 1234)), (b"t", b"T" + struct.pack(">Q", 1))])),
    (b"bytes", b"x" + long(b"\x00\x01")),
    (b"f", b"f" + struct.pack(">f", 1.5)),
    (b"d", b"d" + struct.pack(">d", 2.5)),
])


def handshake():
    out = b"AMQP\x00\x00\x09\x01"
    caps = table([(b"capabilities", b"F" + table([(b"publisher_confirms", b"t\x01")])),
                  (b"connection_name", b"S" + long(b"fuzz"))])
    out += method(0, 10, 11, caps + short(b"PLAIN") + long(b"\0guest\0guest") + short(b"en_US"))
    out += method(0, 10, 31, struct.pack(">HIH", 2047, 131072, 0))
    out += method(0, 10, 40, short(b"/") + short(b"") + b"\x00")
    out += method(1, 20, 10, short(b""))
    return out


def header(size, props=b"\x00\x00"):
    return frame(2, 1, struct.pack(">HHQ", 60, 0, size) + props)


def publish(queue, body, props=b"\x00\x00"):
    out = method(1, 60, 40, b"\x00\x00" + short(b"") + short(queue) + b"\x00")
    out += header(len(body), props)
    if body:
        out += frame(3, 1, body)
    return out


# content-type, headers, delivery-mode
PROPS = b"\xb0\x00" + short(b"text/plain") + SAMPLE_TABLE + b"\x02"

SESSION = (
    handshake()
    + method(1, 50, 10, b"\x00\x00" + short(b"q") + b"\x02" + SAMPLE_TABLE)
    + method(1, 40, 10, b"\x00\x00" + short(b"x") + short(b"topic") + b"\x00" + table([]))
    + method(1, 50, 20, b"\x00\x00" + short(b"q") + short(b"x") + short(b"a.#") + b"\x00" + table([]))
    + method(1, 85, 10, b"\x00")
    + publish(b"q", b"hello", PROPS)
    + publish(b"q", b"")
    + method(1, 60, 70, b"\x00\x00" + short(b"q") + b"\x00")
    + method(1, 60, 80, struct.pack(">Q", 1) + b"\x00")
    + method(1, 60, 10, struct.pack(">IHB", 0, 10, 0))
    + method(1, 60, 20, b"\x00\x00" + short(b"q") + short(b"tag") + b"\x00" + table([]))
    + method(1, 60, 30, short(b"tag") + b"\x00")
    + method(1, 90, 10)
    + method(1, 50, 30, b"\x00\x00" + short(b"q") + b"\x00")
    + method(1, 20, 40, struct.pack(">H", 200) + short(b"bye") + struct.pack(">HH", 0, 0))
    + method(0, 10, 50, struct.pack(">H", 200) + short(b"bye") + struct.pack(">HH", 0, 0))
)

SEEDS = {
    "frame_decoder": {
        "method": method(1, 50, 10, b"\x00\x00" + short(b"q") + b"\x00" + SAMPLE_TABLE),
        "content": header(5, PROPS) + frame(3, 1, b"hello"),
        "heartbeat": frame(8, 0, b""),
        "bad_end": frame(1, 0, b"\x00\x0a\x00\x0b")[:-1] + b"\x00",
    },
    "field_table": {"sample": SAMPLE_TABLE, "empty": table([])},
    "content_assembly": {
        "one_body": header(5, PROPS) + frame(3, 1, b"hello"),
        "two_bodies": header(6) + frame(3, 1, b"abc") + frame(3, 1, b"def"),
        "empty": header(0),
        "too_long": header(2) + frame(3, 1, b"abc"),
    },
    "connection": {"session": SESSION, "handshake": handshake()},
    "topic_matcher": {"star": b"a.*.c|a.b.c", "hash": b"#.x|a.b.x", "tail": b"a.#|a", "empty": b"|"},
    "management_json": {
        "queue": b"\x00" + b'{"durable":true,"arguments":{"x-max-length":10,"x-queue-type":"classic"}}',
        "exchange": b"\x01" + b'{"type":"topic","durable":false,"arguments":{"alternate-exchange":"ae"}}',
        "publish": b"\x02" + b'{"properties":{"headers":{"a":[1,{"b":null}]}},"routing_key":"fq","payload":"aGk=","payload_encoding":"base64"}',
        "user": b"\x03" + b'{"password_hash":"kI3GChNpte2FApYFXScl+0dIluk=","hashing_algorithm":"rabbit_password_hashing_md5","tags":"a,b"}',
        "binding": b"\x04" + b'{"routing_key":"k","arguments":{"x-match":"any"}}',
    },
}

for target, seeds in SEEDS.items():
    d = os.path.join(HERE, target)
    os.makedirs(d, exist_ok=True)
    for name, data in seeds.items():
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)
