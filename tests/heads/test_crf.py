"""CRF vs brute-force enumeration of every tag path on tiny problems."""

from __future__ import annotations

import itertools

import pytest
import torch

from sesame.heads.crf import CRF, bio_transition_mask

TAGS = ["O", "B-LOC", "B-PER", "I-LOC", "I-PER"]


def _path_score(crf: CRF, emissions: torch.Tensor, path: tuple[int, ...]) -> torch.Tensor:
    """Score of one path on one sequence [n, C], written out the textbook way."""
    score = crf.start_transitions[path[0]] + emissions[0, path[0]]
    for t in range(1, len(path)):
        score = score + crf.transitions[path[t - 1], path[t]] + emissions[t, path[t]]
    return score + crf.end_transitions[path[-1]]


def _is_allowed(path: tuple[int, ...], transitions: torch.Tensor, start: torch.Tensor) -> bool:
    return bool(start[path[0]]) and all(bool(transitions[a, b]) for a, b in zip(path, path[1:]))


def _random_crf(num_tags: int, seed: int, constrained: bool = False) -> CRF:
    torch.manual_seed(seed)
    masks = bio_transition_mask(TAGS[:num_tags]) if constrained else (None, None)
    crf = CRF(num_tags, *masks)
    with torch.no_grad():  # larger-than-init scores so the paths are well separated
        for p in crf.parameters():
            p.normal_(0, 1.0)
    return crf


@pytest.mark.parametrize("num_tags", [2, 3])
def test_log_likelihood_equals_brute_force(num_tags: int) -> None:
    crf = _random_crf(num_tags, seed=0)
    lengths = [4, 1, 3, 2]
    batch, max_len = len(lengths), max(lengths)
    emissions = torch.randn(batch, max_len, num_tags)
    mask = torch.arange(max_len).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)
    tags = torch.randint(num_tags, (batch, max_len))
    got = crf.log_likelihood(emissions, tags, mask)
    for b, n in enumerate(lengths):
        all_scores = torch.stack(
            [_path_score(crf, emissions[b, :n], p) for p in itertools.product(range(num_tags), repeat=n)]
        )
        gold = _path_score(crf, emissions[b, :n], tuple(tags[b, :n].tolist()))
        expected = gold - torch.logsumexp(all_scores, 0)
        torch.testing.assert_close(got[b], expected, atol=1e-5, rtol=1e-5)
    # Padding positions (mask False) must not influence the result.
    noisy = emissions.clone()
    noisy[~mask] = 1e3
    torch.testing.assert_close(crf.log_likelihood(noisy, tags, mask), got)
    # The loss is the mean negative log-likelihood, and it has gradients.
    loss = crf(emissions, tags, mask)
    torch.testing.assert_close(loss, -got.mean())
    loss.backward()
    assert crf.transitions.grad is not None and crf.transitions.grad.abs().sum() > 0


def test_likelihoods_of_all_paths_sum_to_one() -> None:
    crf = _random_crf(3, seed=1)
    n = 3
    emissions = torch.randn(1, n, 3)
    paths = torch.tensor(list(itertools.product(range(3), repeat=n)))
    ll = crf.log_likelihood(emissions.expand(len(paths), -1, -1), paths, torch.ones(len(paths), n, dtype=torch.bool))
    torch.testing.assert_close(ll.exp().sum(), torch.tensor(1.0), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("constrained", [False, True])
def test_viterbi_equals_brute_force_argmax(constrained: bool) -> None:
    num_tags = 5
    crf = _random_crf(num_tags, seed=2, constrained=constrained)
    transitions, start = bio_transition_mask(TAGS)
    lengths = [4, 2, 1, 3, 4]
    batch, max_len = len(lengths), max(lengths)
    for trial in range(5):
        emissions = torch.randn(batch, max_len, num_tags) * 2
        mask = torch.arange(max_len).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)
        decoded = crf.decode(emissions, mask, constrained=constrained)
        assert decoded.shape == (batch, max_len)
        assert (decoded[~mask] == 0).all()
        for b, n in enumerate(lengths):
            candidates = [
                p
                for p in itertools.product(range(num_tags), repeat=n)
                if not constrained or _is_allowed(p, transitions, start)
            ]
            scores = torch.stack([_path_score(crf, emissions[b, :n], p) for p in candidates])
            best = candidates[int(scores.argmax())]
            assert tuple(decoded[b, :n].tolist()) == best, (trial, b)


def test_constrained_viterbi_never_emits_invalid_bio() -> None:
    torch.manual_seed(3)
    crf = CRF(len(TAGS), *bio_transition_mask(TAGS))
    with torch.no_grad():
        # Make invalid moves very attractive: I-* tags score highest everywhere.
        crf.transitions.zero_()
        crf.start_transitions.zero_()
    emissions = torch.randn(64, 12, len(TAGS))
    emissions[..., 3:] += 5.0
    mask = torch.arange(12).unsqueeze(0) < torch.randint(1, 13, (64, 1))
    unconstrained = crf.decode(emissions, mask, constrained=False)
    decoded = crf.decode(emissions, mask)
    transitions, start = bio_transition_mask(TAGS)

    def invalid(paths: torch.Tensor) -> int:
        bad = 0
        for row, m in zip(paths.tolist(), mask):
            row = row[: int(m.sum())]
            bad += not _is_allowed(tuple(row), transitions, start)
        return bad

    assert invalid(unconstrained) > 0  # the test would catch a decoder that ignores constraints
    assert invalid(decoded) == 0
    names = [[TAGS[i] for i in row[: int(m.sum())]] for row, m in zip(decoded.tolist(), mask)]
    for seq in names:
        for prev, cur in zip(["O", *seq], seq):
            if cur.startswith("I-"):
                assert prev in (f"B-{cur[2:]}", cur)


def test_bio_transition_mask() -> None:
    transitions, start = bio_transition_mask(["O", "B-creative-work", "I-creative-work", "B-X", "I-X"])
    assert start.tolist() == [True, True, False, True, False]
    # I-creative-work only after B-creative-work / I-creative-work.
    assert transitions[:, 2].tolist() == [False, True, True, False, False]
    assert transitions[:, 4].tolist() == [False, False, False, True, True]
    assert transitions[:, [0, 1, 3]].all()
    with pytest.raises(ValueError, match="not BIO"):
        bio_transition_mask(["O", "PER"])


def test_empty_sequences_and_bad_shapes() -> None:
    crf = _random_crf(3, seed=4)
    emissions = torch.randn(2, 3, 3)
    mask = torch.tensor([[True, True, False], [False, False, False]])
    ll = crf.log_likelihood(emissions, torch.zeros(2, 3, dtype=torch.long), mask)
    assert ll[1] == 0 and torch.isfinite(ll).all()
    assert crf.decode(emissions, mask)[1].tolist() == [0, 0, 0]
    with pytest.raises(ValueError, match="emissions must be"):
        crf.decode(emissions, mask[:, :2])
    with pytest.raises(ValueError, match="constraint masks"):
        CRF(3, torch.ones(2, 2, dtype=torch.bool))
