"""The legacy bridge's settings for one route (built from its ``bridge`` section)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

DEFAULT_STRATEGIES = ("resume", "park")


@dataclass(slots=True)
class BridgeSettings:
    route: str
    #: Strategies in order of preference, for calls without an override.
    strategies: Sequence[str] = DEFAULT_STRATEGIES
    tool_strategies: dict[str, Sequence[str]] = field(default_factory=dict)
    prompt_strategies: dict[str, Sequence[str]] = field(default_factory=dict)
    #: How long a parked call waits for its answer (well under the state TTL).
    park_seconds: float = 120.0
    #: A server in JSON-response mode cannot send a question mid-call; an MRTR-capable call
    #: that has not answered after this long is ended with an error saying so.
    json_response_timeout: float = 30.0
    max_event_bytes: int = 16 * 1024 * 1024
    #: Largest continuation the flow middleware will carry (it seals it as the upstream's state).
    max_state_chars: int = 128 * 1024
    #: This replica's own address, put in the sealed state of parked calls.
    advertise_url: str | None = None
    #: After a question, how long to listen for more asked at the same time (one round for all).
    question_window: float = 0.02

    def strategies_for(self, method: str, target: str | None) -> Sequence[str]:
        if target is not None:
            if method == "tools/call" and target in self.tool_strategies:
                return self.tool_strategies[target]
            if method == "prompts/get" and target in self.prompt_strategies:
                return self.prompt_strategies[target]
        return self.strategies
