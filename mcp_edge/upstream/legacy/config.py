"""A route's ``bridge:``: how 2026-07-28 calls to a legacy upstream go on after it asked a question."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from mcp_edge.sections import Section

Strategy = Literal["resume", "park", "replay"]


def _strategy_list(v: Any) -> Any:
    """A strategy may be given alone or as a list in order of preference."""
    if isinstance(v, str):
        v = [v]
    if isinstance(v, list):
        if not v:
            raise ValueError("give at least one strategy (resume, park, replay)")
        if len(set(v)) != len(v):
            raise ValueError("a strategy is listed twice")
    return v


class BridgeSection(Section):
    """How 2026-07-28 calls to a legacy upstream continue after the server asked a question."""

    #: In order of preference: the first one a call can use is taken. ``resume`` needs an
    #: upstream event store; ``park`` holds the call on one replica; ``replay`` re-runs the call
    #: (only for tools that do nothing irreversible before their questions: an opt-in).
    strategy: list[Strategy] = Field(default_factory=lambda: list[Strategy](["resume", "park"]))
    #: Per-tool / per-prompt strategies, overriding ``strategy``.
    tools: dict[str, list[Strategy]] = Field(default_factory=dict)
    prompts: dict[str, list[Strategy]] = Field(default_factory=dict)
    #: How long a parked call waits for its answer before it is cancelled upstream (never longer
    #: than ``state.ttl_seconds``: after that its state is expired anyway).
    park_seconds: float = Field(120.0, gt=0, le=3600)
    #: After a question, how long to listen for more that the server asks at the same time, so
    #: the client gets them in one round (0: one question per round).
    question_window_ms: int = Field(20, ge=0, le=5000)
    #: A JSON-response-mode server cannot ask mid-call; its calls fail after this long.
    json_response_timeout: float = Field(30.0, gt=0, le=3600)
    #: Idle legacy sessions kept for reuse by the same caller (one-shot calls), and for how long.
    max_idle_sessions: int = Field(64, ge=0, le=10_000)
    session_idle_seconds: float = Field(60.0, gt=0, le=3600)

    @field_validator("strategy", mode="before")
    @classmethod
    def _strategies(cls, v: Any) -> Any:
        return _strategy_list(v)

    @field_validator("tools", "prompts", mode="before")
    @classmethod
    def _per_name(cls, v: Any) -> Any:
        return {k: _strategy_list(s) for k, s in v.items()} if isinstance(v, dict) else v
