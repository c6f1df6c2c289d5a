"""Protobuf message classes made in code from a subset of a ``.proto`` file's messages.

For formats whose ``.proto`` ships with no Python package tracelink can import (pprof's profile, XLA's
HLO module): the fields read or written are declared by name, number and type, the others are skipped
on parsing as unknown fields, so a message stays wire-compatible with the full one.
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

INT32, INT64, UINT64, STRING, MESSAGE = (
    descriptor_pb2.FieldDescriptorProto.TYPE_INT32,
    descriptor_pb2.FieldDescriptorProto.TYPE_INT64,
    descriptor_pb2.FieldDescriptorProto.TYPE_UINT64,
    descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
    descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE,
)
# message -> (field, number, type, repeated, message type or "")
Schema = dict[str, list[tuple[str, int, int, bool, str]]]


def message_class(package: str, schema: Schema, root: str) -> type:
    """The class of message ``root`` of ``schema``, its messages declared in ``package`` (proto3)."""
    file = descriptor_pb2.FileDescriptorProto(name=f"{package}.proto", package=package, syntax="proto3")
    for name, fields in schema.items():
        message = file.message_type.add(name=name)
        for field_name, number, kind, repeated, type_name in fields:
            label = descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED if repeated else descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL
            message.field.add(name=field_name, number=number, type=kind, label=label, type_name=f".{package}.{type_name}" if type_name else None)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.{root}"))
