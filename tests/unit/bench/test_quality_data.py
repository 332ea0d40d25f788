"""The bench.quality generator: deterministic, and its truth agrees with the memories it made."""

from __future__ import annotations

import random
import re
from collections import Counter

import pytest

from bench import quality_data, quality_vocab
from bench.quality_data import Dataset, generate, normalise

SLOT = re.compile(r"{(\w+)}")


@pytest.fixture(scope="module")
def dataset() -> Dataset:
    return generate(seed=11, agents=2, questions_per_agent=48)


def test_the_same_seed_gives_the_same_data_set_and_another_seed_another() -> None:
    first, again = generate(seed=5, agents=2, questions_per_agent=12), generate(seed=5, agents=2, questions_per_agent=12)
    assert first == again
    assert first.fingerprint() == again.fingerprint()
    assert generate(seed=6, agents=2, questions_per_agent=12).fingerprint() != first.fingerprint()


def test_sizes_are_those_of_the_defaults_per_agent(dataset: Dataset) -> None:
    for agent in dataset.agents:
        memories = [m for m in dataset.memories if m.agent_id == agent.agent_id]
        questions = [q for q in dataset.questions if q.agent_id == agent.agent_id]
        assert 600 <= len(memories) <= 900
        assert len(questions) == 48
    assert len({m.memory_id for m in dataset.memories}) == len(dataset.memories)
    assert len({q.question_id for q in dataset.questions}) == len(dataset.questions)


def test_every_question_has_one_to_three_evidence_memories_of_its_own_agent(dataset: Dataset) -> None:
    by_id = {m.memory_id: m for m in dataset.memories}
    for question in dataset.questions:
        assert 1 <= len(question.evidence) <= 3
        assert len(set(question.evidence)) == len(question.evidence)
        for memory_id in question.evidence:
            memory = by_id[memory_id]
            assert memory.agent_id == question.agent_id
            assert memory.kind in (quality_data.KIND_ANSWER, quality_data.KIND_CORE)
    assert {q.style for q in dataset.questions} == {"lexical", "paraphrase"}
    assert any(len(q.evidence) > 1 for q in dataset.questions)


def test_verbatim_pairs_are_the_same_text_and_paraphrases_are_not(dataset: Dataset) -> None:
    by_id = {m.memory_id: m for m in dataset.memories}
    assert dataset.verbatim_pairs and dataset.paraphrase_pairs
    for original, copy in dataset.verbatim_pairs:
        a, b = by_id[original], by_id[copy]
        assert original != copy and a.agent_id == b.agent_id and b.kind == quality_data.KIND_VERBATIM
        assert normalise(a.content) == normalise(b.content)
    for original, copy in dataset.paraphrase_pairs:
        a, b = by_id[original], by_id[copy]
        assert original != copy and a.agent_id == b.agent_id and b.kind == quality_data.KIND_PARAPHRASE
        assert normalise(a.content) != normalise(b.content)
        shared = Counter(normalise(a.content).split()) & Counter(normalise(b.content).split())
        assert sum(shared.values()) >= 0.7 * len(normalise(a.content).split())
    evidence = {e for q in dataset.questions for e in q.evidence}
    assert any(original in evidence for original, _ in dataset.verbatim_pairs)
    assert any(original in evidence for original, _ in dataset.paraphrase_pairs)


def test_equal_normalised_texts_are_exactly_the_verbatim_pairs(dataset: Dataset) -> None:
    by_text: dict[tuple[str, str], list[str]] = {}
    for memory in dataset.memories:
        by_text.setdefault((memory.agent_id, normalise(memory.content)), []).append(memory.memory_id)
    equal = {frozenset(ids) for ids in by_text.values() if len(ids) > 1}
    assert equal == {frozenset(pair) for pair in dataset.verbatim_pairs}


def test_copies_are_symmetric(dataset: Dataset) -> None:
    copies = dataset.copies()
    for original, copy in (*dataset.verbatim_pairs, *dataset.paraphrase_pairs):
        assert copy in copies[original] and original in copies[copy]


def test_lengths_are_mostly_short_turns_with_a_long_tail(dataset: Dataset) -> None:
    words = [len(m.content.split()) for m in dataset.memories]
    assert sum(8 <= n <= 40 for n in words) / len(words) >= 0.75
    assert max(words) <= quality_data.MAX_WORDS + 1  # the speaker prefix
    assert sum(n > 60 for n in words) > 0
    assert all(0.0 <= m.age_days <= 366.0 for m in dataset.memories)


def test_dialog_turns_name_one_of_the_two_speakers(dataset: Dataset) -> None:
    speakers = {a.agent_id: (a.user, a.partner) for a in dataset.agents}
    for memory in dataset.memories:
        if memory.category == "episodic":
            assert memory.content.split(":", 1)[0].casefold() in {s.casefold() for s in speakers[memory.agent_id]}
        else:
            assert memory.kind == quality_data.KIND_CORE


def test_every_frame_key_is_in_both_questions_and_every_slot_has_values() -> None:
    known = set(quality_vocab.POOLS) | set(quality_vocab.GENERATED) | {"user", "partner"}
    for topic in quality_vocab.TOPICS:
        assert len(topic.frames) == 4 and len(topic.words) >= 2
        for frame in topic.frames:
            if frame.key is not None:
                assert f"{{{frame.key}}}" in frame.lexical and f"{{{frame.key}}}" in frame.paraphrase
            for text in (*frame.statements, frame.lexical, frame.paraphrase):
                assert {name.rstrip("0123456789") for name in SLOT.findall(text)} <= known, text


def test_paraphrase_keeps_the_speaker_and_changes_the_text() -> None:
    rng = random.Random(3)
    text = "Maya: I finally got the new tickets, they are really lovely."
    for _ in range(20):
        changed = quality_data.paraphrase(text, rng)
        assert changed.startswith("Maya: ") and normalise(changed) != normalise(text)
        assert normalise(quality_data.verbatim(text, rng)) == normalise(text)
