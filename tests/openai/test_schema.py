"""The protocol's routes are in the service's OpenAPI schema, each request body with an example and
each route documenting its errors, so `/docs` shows them and the fuzz (tests/chaos) reaches them."""

from __future__ import annotations

from tests.support.service_kit import serving
from threadline.client import Threadline
from threadline.http import create_app


async def test_every_protocol_route_is_in_the_schema_with_examples(tl: Threadline) -> None:
    """Conversations, items and responses are documented, with examples and their 4XX answers."""
    async with serving(create_app(tl)) as http:
        spec = (await http.get("/openapi.json")).json()
    schemas = spec["components"]["schemas"]
    operations = {
        f"{method.upper()} {path}": op
        for path, item in spec["paths"].items()
        if path.startswith("/openai/v1/")
        for method, op in item.items()
    }
    bodies = [
        op["requestBody"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]
        for op in operations.values()
        if "requestBody" in op
    ]

    assert {
        "POST /openai/v1/conversations",
        "GET /openai/v1/conversations/{conversation_id}",
        "POST /openai/v1/conversations/{conversation_id}",
        "DELETE /openai/v1/conversations/{conversation_id}",
        "GET /openai/v1/conversations/{conversation_id}/items",
        "POST /openai/v1/conversations/{conversation_id}/items",
        "POST /openai/v1/responses",
        "GET /openai/v1/responses/{response_id}",
        "POST /openai/v1/responses/{response_id}/cancel",
    } == set(operations)
    assert [] == [name for name in bodies if not schemas[name].get("examples")]
    assert all("4XX" in op["responses"] for op in operations.values())
    assert {"ConversationObject", "ItemList", "ResponseObject"} <= {
        name for name in schemas if schemas[name].get("examples")
    }
