"""The metric names of the queries of RabbitMQ's Grafana dashboards, as
tests/admin/fixtures/rabbitmq-dashboard-queries.json transcribes them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

FIXTURE = Path(__file__).parents[1] / "admin" / "fixtures" / "rabbitmq-dashboard-queries.json"
DASHBOARDS: dict[str, Any] = json.loads(FIXTURE.read_text())


def queries_without_series(dashboard: str, names: set[str]) -> list[str]:
    """The panels of `dashboard` one of whose query's metric names has no series."""
    return [query["panel"] for query in DASHBOARDS[dashboard]["queries"]
            if not set(query["metrics"]) <= names]
