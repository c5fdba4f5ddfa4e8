"""The autoscaler's HTTP API: health, readiness and status; it reads the loop's state, never acts."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Response

from warmswarm_autoscaling.loop import Autoscaler


def create_app(autoscaler: Autoscaler, *, ready_within_s: float, clock: Any) -> FastAPI:
    app = FastAPI(title="warmswarm autoscaling", version="0.1.0")

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "alive"}

    @app.get("/ready")
    def ready(response: Response) -> dict[str, Any]:
        last = autoscaler.status.last_success_at
        age_s = None if last is None else clock() - last
        ok = age_s is not None and age_s <= ready_within_s
        response.status_code = 200 if ok else 503
        return {"ready": ok, "last_success_age_s": age_s}

    @app.get("/v1/status")
    def status() -> dict[str, Any]:
        return autoscaler.status_json()

    return app
