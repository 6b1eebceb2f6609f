"""When the decode worker speculates, and how far: γ per request from Eq. 5 over costs the engine measures.

A round over a batch of B rows that drafts up to γ tokens costs C(B, γ) = T_D-part + T_V(B, γ) (``CostTable``:
measured at start-up over synthetic rows, then corrected from every step the engine runs); plain decoding costs
C(B, 0) = T_T(B). Row b with running acceptance rate α_b and γ_b drafts commits Ω(γ_b, α_b) =
(1 - α_b^(γ_b+1)) / (1 - α_b) tokens on average (Eq. 4). Eq. 5 batched: the step's γ maximises
Σ_b Ω(min(γ, cap_b), α_b) / C(B, γ) over γ = 0..γ_max, where cap_b is the row's tokens still due minus one (a draft
past the end is waste); γ = 0 wins unless speculation beats plain decoding by ``margin``. A request whose running
α stays below ``stop_below`` after ``min_rounds`` rounds stops speculating (γ_b = 0 from then on); a new request's α
starts from the rate every request so far accepted (``alpha_prior`` before any), counted as ``prior_weight`` tests.

Eq. 5 reads each row's α optimistically: its running rate plus ``optimism`` standard errors (a row with few tests keeps
drafting until its own rounds show that drafts fail; the stop rule reads the plain rate). Without it a γ = 0 step
teaches nothing, so one request's early rejections became the prior of every request after it: in one of four
in-process runs of the CPU pair over the serving prompts the policy decoded 684 of 688 steps plainly, where the
other three accepted drafts at α ≈ 0.82.

Policies (``POLICIES``): ``none`` (the engine of notebook 05: no drafter at all), ``fixed`` (every row drafts γ
every step, capped only at the end of its output) and ``adaptive`` (the rule above).
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass

from helpers.batching.request import Request
from helpers.batching.speculation import DRAFTERS

POLICIES = ("none", "fixed", "adaptive")


@dataclass(frozen=True)
class SpecConfig:
    """Speculation in the decode worker: the drafter, the policy and their knobs."""

    drafter: str = "draft"  # helpers.batching.speculation.DRAFTERS
    draft: str | None = None  # the "draft" drafter's model name (helpers.models.load_model); the "feature" drafter's
    # directory (helpers.specdec.load_feature_draft; None: the CPU pair's)
    policy: str = "adaptive"  # POLICIES
    gamma: int = 4  # the fixed policy's γ; the largest the adaptive policy considers
    window: int = 64  # the self-draft's recent window (tokens)
    sinks: int = 4  # the self-draft's attention sinks
    ngram: int = 3  # the lookup drafter's longest suffix
    alpha_prior: float = 0.6  # the engine's α before any round
    prior_weight: float = 4.0  # how many acceptance tests the prior counts as
    stop_below: float = 0.25  # running α under which a request stops speculating ...
    min_rounds: int = 6  # ... once it has run this many rounds
    margin: float = 0.03  # speculate only when Eq. 5 predicts at least this gain
    optimism: float = 1.0  # standard errors added to a row's α in Eq. 5 (0: the running rate itself)
    calibration_context: int = 64  # tokens per synthetic row when the costs are measured at start-up
    calibration_repeats: int = 3

    def __post_init__(self) -> None:
        if self.drafter not in DRAFTERS:
            raise ValueError(f"unknown drafter {self.drafter!r}; choose one of {', '.join(DRAFTERS)}")
        if self.drafter == "draft" and self.policy != "none" and not self.draft:
            raise ValueError("the 'draft' drafter needs a draft model: pass draft='<model name or directory>'")
        if self.policy not in POLICIES:
            raise ValueError(f"unknown speculation policy {self.policy!r}; choose one of {', '.join(POLICIES)}")
        if isinstance(self.gamma, bool) or not isinstance(self.gamma, int) or self.gamma < 1:
            raise ValueError(f"gamma must be an int >= 1 (the fixed γ, or the adaptive policy's largest), got "
                             f"{self.gamma!r}")
        if not 0 <= self.alpha_prior < 1 or not 0 <= self.stop_below < 1:
            raise ValueError(f"alpha_prior ({self.alpha_prior}) and stop_below ({self.stop_below}) must lie in [0, 1)")
        if not self.optimism >= 0:
            raise ValueError(f"optimism must be >= 0 standard errors, got {self.optimism!r}")

    @property
    def speculates(self) -> bool:
        return self.policy != "none"

    @property
    def reads_features(self) -> bool:
        """Whether the drafter drafts from the target's features (the prefill worker then sends them)."""
        return self.speculates and self.drafter == "feature"

    @property
    def headroom(self) -> int:
        """KV slots a round may hold past a row's committed tokens."""
        return self.gamma if self.speculates else 0


class CostTable:
    """Seconds per decode step by (batch size, γ): measured at start-up (batch sizes between measured ones
    interpolated linearly, beyond them scaled in proportion), then corrected online from every step the engine runs.

    A step that took r times what the table predicted moves half of that surprise (geometrically, by
    ``smoothing``) into a factor for its batch size, which every γ at that batch shares (the machine got busier, the
    contexts grew), and half into a factor for its own (batch, γ) entry. The policy only ever runs the γ it chose,
    so a correction of that entry alone would leave plain decoding's cost as it was at start-up and bias every later
    comparison; and the entries it does not run relax back towards the start-up measurement, so that a burst of
    noise on one γ cannot lock the policy out of it for good."""

    def __init__(self, seconds: dict[tuple[int, int], float], smoothing: float = 0.2) -> None:
        self.seconds = dict(seconds)
        gammas = {gamma for _, gamma in self.seconds}
        self.sizes = {g: sorted(b for b, gamma in self.seconds if gamma == g) for g in gammas}
        self.smoothing = smoothing
        self.batch_factor: dict[int, float] = {}
        self.entry_factor: dict[tuple[int, int], float] = {}

    def measured(self, batch: int, gamma: int) -> float:
        """The start-up measurement at ``batch`` (interpolated, or scaled beyond the largest measured batch)."""
        sizes = self.sizes.get(gamma)
        if not sizes:
            raise KeyError(f"no cost measured for gamma={gamma}")
        i = bisect.bisect_left(sizes, batch)
        if i < len(sizes) and sizes[i] == batch:
            return self.seconds[batch, gamma]
        if i == 0:
            return self.seconds[sizes[0], gamma]
        if i == len(sizes):
            return self.seconds[sizes[-1], gamma] * batch / sizes[-1]
        low, high = sizes[i - 1], sizes[i]
        w = (batch - low) / (high - low)
        return (1 - w) * self.seconds[low, gamma] + w * self.seconds[high, gamma]

    def cost(self, batch: int, gamma: int) -> float:
        return (self.measured(batch, gamma) * self.batch_factor.get(batch, 1.0)
                * self.entry_factor.get((batch, gamma), 1.0))

    def observe(self, batch: int, gamma: int, seconds: float) -> None:
        step = (seconds / self.cost(batch, gamma)) ** (self.smoothing / 2)
        self.batch_factor[batch] = self.batch_factor.get(batch, 1.0) * step
        for key, factor in self.entry_factor.items():  # unobserved entries relax back towards the measurement
            if key[0] == batch and key[1] != gamma:
                self.entry_factor[key] = factor ** (1 - self.smoothing / 2)
        self.entry_factor[batch, gamma] = self.entry_factor.get((batch, gamma), 1.0) * step


class RunningAlpha:
    """A request's acceptance rate from its own rounds (accepted drafts and rejections), with a prior."""

    def __init__(self, prior: float, weight: float) -> None:
        self.prior, self.weight = prior, weight
        self.accepted = self.rejections = self.rounds = 0

    def add(self, drafted: int, accepted: int) -> None:
        if drafted:
            self.rounds += 1
            self.accepted += accepted
            self.rejections += accepted < drafted

    @property
    def tests(self) -> float:
        """Acceptance tests seen, the prior counted as ``weight`` of them."""
        return self.accepted + self.rejections + self.weight

    @property
    def value(self) -> float:
        return (self.accepted + self.prior * self.weight) / self.tests

    def upper(self, z: float) -> float:
        """The rate plus ``z`` standard errors of a rate over :attr:`tests` Bernoulli tests (below 1)."""
        value = self.value
        return min(value + z * (value * (1 - value) / (self.tests + 1)) ** 0.5, 0.99)


class GammaPolicy:
    """Chooses each row's γ for the next step and learns from what the step did."""

    def __init__(self, spec: SpecConfig, costs: CostTable | None, max_seq_len: int) -> None:
        if spec.policy == "adaptive" and costs is None:
            raise ValueError("the adaptive policy needs measured costs (a CostTable)")
        self.spec, self.costs, self.max_seq_len = spec, costs, max_seq_len
        self.alphas: dict[int, RunningAlpha] = {}
        self.engine_alpha = RunningAlpha(spec.alpha_prior, spec.prior_weight)  # pooled over every request
        self.predicted_gain = 1.0

    def _alpha(self, request: Request) -> RunningAlpha:
        if request.id not in self.alphas:  # a new request starts from what every request so far accepted
            self.alphas[request.id] = RunningAlpha(self.engine_alpha.value, self.spec.prior_weight)
        return self.alphas[request.id]

    def stopped(self, request: Request) -> bool:
        alpha = self._alpha(request)
        return alpha.rounds >= self.spec.min_rounds and alpha.value < self.spec.stop_below

    def choose(self, requests: list[Request]) -> list[int]:
        caps = [max(0, min(self.spec.gamma, r.max_new_tokens(self.max_seq_len) - len(r.generated) - 1))
                for r in requests]
        if self.spec.policy == "fixed":
            return caps
        caps = [0 if self.stopped(r) else cap for r, cap in zip(requests, caps)]
        alphas = [self._alpha(r).upper(self.spec.optimism) for r in requests]
        batch, top = len(requests), max(caps, default=0)
        seconds = [self.costs.cost(batch, g) for g in range(top + 1)]
        plain = batch / seconds[0]
        best, best_rate = 0, plain * (1 + self.spec.margin)
        # Eq. 4 row by row, one γ after the other: Ω(γ) = Ω(γ - 1) + α^γ while γ <= the row's cap. Plain float
        # arithmetic, as the policy runs before every step: at these sizes numpy's call overhead is what costs
        omega, power = [1.0] * batch, [1.0] * batch
        for gamma in range(1, top + 1):
            for b in range(batch):
                if gamma <= caps[b]:
                    power[b] *= alphas[b]
                    omega[b] += power[b]
            rate = sum(omega) / seconds[gamma]
            if rate > best_rate:
                best, best_rate = gamma, rate
        self.predicted_gain = best_rate / plain if best else 1.0  # Eq. 5's speedup of the chosen step
        return [min(best, cap) for cap in caps]

    def observe(self, requests: list[Request], info: dict) -> None:
        """Learn from one step: every row's drafts and acceptances, and the step's cost at its batch and γ."""
        for request, drafted, accepted in zip(requests, info["drafted"], info["accepted"]):
            self._alpha(request).add(drafted, accepted)
            self.engine_alpha.add(drafted, accepted)
        if self.costs is not None:
            self.costs.observe(len(requests), info["gamma"], info["draft_s"] + info["verify_s"])


def calibration_batches(max_batch: int) -> list[int]:
    """Batch sizes the start-up measurement times: powers of two up to ``max_batch``, and ``max_batch``."""
    sizes, b = [], 1
    while b < max_batch:
        sizes.append(b)
        b *= 2
    return sizes + [max_batch]


def measure_costs(make_batch, prefill_rows, spec: SpecConfig, max_batch: int, vocab: int) -> CostTable:
    """Time a step at every calibration batch size and γ = 0..γ_max over synthetic rows of
    ``spec.calibration_context`` tokens (a periodic sequence, so that prompt lookup always finds a match): the γ
    interleaved, the median of ``spec.calibration_repeats`` passes.

    ``make_batch()``: a fresh, empty :class:`~helpers.batching.speculation.SpecDecodeBatch`;
    ``prefill_rows(requests)``: their first tokens and KV (``helpers.batching.model_ops.prefill``)."""
    seconds = {}
    period = 11
    for size in calibration_batches(max_batch):
        requests = [Request(-1 - i, [(3 + 7 * i + j % period) % vocab for j in range(spec.calibration_context)], 10**6)
                    for i in range(size)]
        first, *prefilled = prefill_rows(requests)  # KV, and features where the drafter reads them
        for request, token in zip(requests, first):
            request.generated.append(token)
        batch = make_batch()
        batch.add(requests, *prefilled)
        times = {gamma: [] for gamma in range(spec.gamma + 1)}
        gammas = list(times)
        for repeat in range(spec.calibration_repeats + 1):  # the first pass is a warm-up
            # every γ once per pass, the order reversed every pass: a burst of load, and the context that grows
            # with every round, fall on all of them alike (one γ after the other timed larger γ at longer contexts)
            for gamma in gammas if repeat % 2 == 0 else gammas[::-1]:
                new, info = batch.advance([gamma] * size)
                if repeat:
                    times[gamma].append(info["draft_s"] + info["verify_s"])
                for request, tokens in zip(requests, new):
                    request.generated.extend(tokens)
        seconds.update({(size, gamma): sorted(t)[len(t) // 2] for gamma, t in times.items()})
    return CostTable(seconds)
