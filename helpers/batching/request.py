"""A generation request and its life cycle: queued -> prefill -> decode -> done."""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


class State(str, Enum):
    QUEUED = "queued"
    PREFILL = "prefill"
    DECODE = "decode"
    DONE = "done"


_NEXT_STATE = {State.QUEUED: State.PREFILL, State.PREFILL: State.DECODE, State.DECODE: State.DONE}


@dataclass
class Request:
    """One prompt to complete greedily.

    ``output_length`` is the number of new tokens wanted, when the client says so; ``None`` means "until EOS or
    the model's maximum length", which memory accounting must treat as the worst case. Generation stops on the
    EOS token or at that maximum, whichever comes first. Times are seconds since the engine started;
    ``arrival_s`` is when the request reaches the engine (0 for every request: the handout's offline setting;
    notebook 14 draws Poisson arrivals), and the latencies count from it.
    """

    id: int
    input_tokens: list[int]
    output_length: int | None = None
    arrival_s: float = 0.0
    state: State = State.QUEUED
    generated: list[int] = field(default_factory=list)
    finish_reason: str | None = None  # "eos" or "length"
    t_prefill_start: float | None = None
    t_first_token: float | None = None
    t_last_token: float | None = None
    t_done: float | None = None  # when the client gets the whole output

    def __post_init__(self) -> None:
        if len(self.input_tokens) == 0:
            raise ValueError(f"request {self.id}: the prompt is empty; give at least one input token")
        if self.output_length is not None and (not isinstance(self.output_length, int) or self.output_length < 1):
            raise ValueError(
                f"request {self.id}: output_length={self.output_length!r} is not valid; "
                "use a positive number of new tokens, or None for 'until EOS or the model's maximum length'"
            )
        if not self.arrival_s >= 0:
            raise ValueError(f"request {self.id}: arrival_s={self.arrival_s!r} must be a time >= 0 (seconds)")

    @property
    def prompt_len(self) -> int:
        return len(self.input_tokens)

    def max_new_tokens(self, max_seq_len: int) -> int:
        """The most tokens this request may generate: its output length if known, else up to the model's limit."""
        if self.output_length is not None:
            return self.output_length
        return max_seq_len - self.prompt_len

    def check_length(self, max_seq_len: int) -> None:
        """Raise if prompt plus output cannot fit in the model's context."""
        total = self.prompt_len + (self.output_length or 1)
        if total > max_seq_len:
            raise ValueError(
                f"request {self.id}: prompt ({self.prompt_len} tokens) + output "
                f"({self.output_length or 'at least 1'} tokens) exceeds the model's maximum length {max_seq_len}; "
                "shorten the prompt or lower output_length"
            )

    def advance(self, state: State) -> None:
        """Move to the next state; the order is fixed, so a skipped or repeated step is a bug worth raising."""
        if _NEXT_STATE.get(self.state) != state:
            raise RuntimeError(f"request {self.id}: cannot go from {self.state.value} to {state.value}")
        self.state = state

    def add_token(self, token: int, *, eos_token_id: int | None, max_seq_len: int) -> bool:
        """Append a generated token; return True (and record why) when the request must stop."""
        if self.state is State.DONE:
            raise RuntimeError(f"request {self.id} is done; it cannot take more tokens")
        self.generated.append(token)
        if eos_token_id is not None and token == eos_token_id:
            self.finish_reason = "eos"
        elif len(self.generated) >= self.max_new_tokens(max_seq_len):
            self.finish_reason = "length"
        return self.finish_reason is not None

    # latency metrics (seconds), available once the request is done
    @property
    def ttft(self) -> float:
        return self.t_first_token - self.arrival_s

    @property
    def tpot(self) -> float:
        """Time per output token after the first (nan for single-token outputs)."""
        n = len(self.generated)
        return (self.t_last_token - self.t_first_token) / (n - 1) if n > 1 else float("nan")

    @property
    def e2e(self) -> float:
        return self.t_done - self.arrival_s
