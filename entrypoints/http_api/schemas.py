"""AssembleContext in the HTTP API's JSON mapping, for callers outside the HTTP edge.

``entrypoints.cli.assemble_cmd`` reads ``--request FILE`` and prints ``--json`` with these: the same
mapping as the HTTP edge (``proto_json``: ``json_format`` over the generated messages, errors naming
the proto field) and the same translation as both edges (``entrypoints.translation``).
"""

from __future__ import annotations

from typing import Any

from contracts.ibex.context.v1 import context_pb2 as pb
from domain.model.assembly import AssembleRequest, AssemblyResult
from entrypoints import translation
from entrypoints.http_api.proto_json import parse, render


def assemble_request_from_json(data: object) -> AssembleRequest:
    """Decoded JSON values (``proto_json.loads_object``) -> the domain request; InvalidRequestError naming the field."""
    return translation.assemble_request_from_proto(parse(data, pb.AssembleContextRequest))


def assemble_response_to_json(result: AssemblyResult) -> dict[str, Any]:
    """The AssembleContextResponse JSON of ``result``, as the HTTP edge answers it."""
    return render(translation.assembly_to_proto(result))
