"""A rollout's evidence keeps a bounded sample of latencies, however long the step runs."""

from __future__ import annotations

from gateway.rollout.evidence import LATENCY_SAMPLES, RolloutEvidence


def test_the_latency_samples_stay_at_their_bound() -> None:
    evidence = RolloutEvidence()
    for n in range(LATENCY_SAMPLES * 10):
        evidence.candidate_latency.append(n / 1e3)
        evidence.current_latency.append(n / 1e3)
        evidence.comparison(n % 3 != 0, [] if n % 3 else ["label"])
    assert len(evidence.candidate_latency) == LATENCY_SAMPLES
    assert len(evidence.current_latency) == LATENCY_SAMPLES
    assert evidence.compared == LATENCY_SAMPLES * 10
    assert set(evidence.disagreements) == {"label"}  # by output name: the model's outputs
