"""The seeded data set of ``bench.quality``: agents, their memories, questions and the truth.

Deterministic: ``generate(seed, agents, questions_per_agent)`` draws everything from one
``random.Random(seed)``; ids are UUIDv5 of the seed and a counter. Per agent:

* core facts about the agent and its user (factual/preference, high confidence and usefulness,
  so they top the hot list);
* 10 to 16 topics (``quality_vocab.TOPICS``); one question per chosen *frame* (a fact), whose
  statements are the question's evidence (1 to 3 dialog turns ``"User: text"``, episodic, placed in
  different sessions); a few questions are about core facts; the question is phrased with the
  statements' content words (``lexical``) or with synonyms (``paraphrase``);
* distractors: near misses (the same frame about another city, band, ...), same-topic chatter
  sharing the topic's words, and off-topic filler; all turns of a two-person conversation spread
  over dated sessions (up to a year old), so recency varies;
* verbatim copies (the same text up to case, spacing and punctuation, another id) and paraphrased
  copies (a few words swapped or reordered) of some memories, evidence among them.

Lengths are drawn like dialog memories: mostly 8 to 40 words, a tail of long ones up to ~150
words (the sentence that matters sits among padding). Every memory's normalised text is unique
except within a verbatim pair, so content-equal duplicates are exactly ``verbatim_pairs``.
Memories carry an age in days, not a date: the driver dates them relative to its clock.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
import string
import uuid
from collections.abc import Callable, Iterable

import attrs

from bench import quality_vocab as vocab

NAMESPACE = uuid.UUID("5b0f6f1e-2f7c-4a51-9d43-7c1e2b8a9f60")
DEFAULT_AGENTS = 8
DEFAULT_QUESTIONS_PER_AGENT = 48
CORE_QUESTIONS = 3
SESSIONS = 32
CHATTER_PER_TOPIC = (18, 26)
FILLER_PER_AGENT = (300, 380)
NEAR_MISSES_PER_FRAME = (1, 2)
COPIED_EVIDENCE_SHARE = 0.1  # of the evidence memories, each gets a verbatim copy, as many a paraphrased one
OTHER_COPIES = 8  # distractors per agent with a verbatim copy, as many with a paraphrased one
LEXICAL_SHARE = 0.5
MAX_WORDS = 150

KIND_CORE = "core"
KIND_ANSWER = "answer"
KIND_NEAR_MISS = "near_miss"
KIND_CHATTER = "chatter"
KIND_FILLER = "filler"
KIND_VERBATIM = "verbatim_copy"
KIND_PARAPHRASE = "paraphrase_copy"

_PUNCTUATION = re.compile(f"[{re.escape(string.punctuation)}]")
_SLOT = re.compile(r"{(\w+)}")


def normalise(text: str) -> str:
    """Casefolded, punctuation stripped, whitespace collapsed: what "the same text" means here."""
    return " ".join(_PUNCTUATION.sub("", text.casefold()).split())


@attrs.frozen
class Memory:
    memory_id: str
    agent_id: str
    content: str
    category: str
    confidence: float
    usefulness: float
    age_days: float
    kind: str
    topic: str = ""


@attrs.frozen
class Question:
    question_id: str
    agent_id: str
    text: str
    evidence: tuple[str, ...]
    style: str  # lexical | paraphrase
    topic: str


@attrs.frozen
class Agent:
    agent_id: str
    name: str
    user: str
    partner: str
    directive: str


@attrs.frozen
class Dataset:
    seed: int
    org_id: str
    agents: tuple[Agent, ...]
    memories: tuple[Memory, ...]
    questions: tuple[Question, ...]
    verbatim_pairs: tuple[tuple[str, str], ...]  # (original, copy)
    paraphrase_pairs: tuple[tuple[str, str], ...]

    def copies(self) -> dict[str, frozenset[str]]:
        """Each memory that has copies -> the other members of its copy group (both directions)."""
        groups: dict[str, set[str]] = {}
        for a, b in (*self.verbatim_pairs, *self.paraphrase_pairs):
            group = groups.get(a, {a}) | groups.get(b, {b})
            for member in group:
                groups[member] = group
        return {m: frozenset(group - {m}) for m, group in groups.items()}

    def fingerprint(self) -> str:
        """sha256 of everything generated (first 16 hex digits): equal iff the data set is."""
        body = json.dumps([self.seed, self.org_id, [attrs.astuple(a) for a in self.agents],
                           [attrs.astuple(m) for m in self.memories], [attrs.astuple(q) for q in self.questions],
                           self.verbatim_pairs, self.paraphrase_pairs], separators=(",", ":"))
        return hashlib.sha256(body.encode()).hexdigest()[:16]


def generate(seed: int = 7, agents: int = DEFAULT_AGENTS,
             questions_per_agent: int = DEFAULT_QUESTIONS_PER_AGENT) -> Dataset:
    """The data set of ``agents`` agents; each has ``questions_per_agent`` questions, at most
    ``CORE_QUESTIONS`` + one per frame of the vocabulary (67)."""
    rng = random.Random(seed)
    org_id = str(uuid.uuid5(NAMESPACE, f"{seed}:org"))
    built = [_AgentBuilder(rng, seed, index).build(questions_per_agent) for index in range(agents)]
    return Dataset(
        seed=seed, org_id=org_id, agents=tuple(b.agent for b in built),
        memories=tuple(m for b in built for m in b.memories), questions=tuple(q for b in built for q in b.questions),
        verbatim_pairs=tuple(p for b in built for p in b.verbatim_pairs),
        paraphrase_pairs=tuple(p for b in built for p in b.paraphrase_pairs),
    )


def draw_words(rng: random.Random) -> int:
    """A memory's target length in words: mostly 8-40 (median ~16), 1 in 8 long (40-150)."""
    if rng.random() < 0.875:
        return min(40, max(8, round(rng.lognormvariate(math.log(16.0), 0.45))))
    return rng.randint(41, MAX_WORDS)


def paraphrase(text: str, rng: random.Random) -> str:
    """``text`` with a few words swapped for synonyms or reordered (names and numbers kept)."""
    speaker, body = _split_speaker(text)
    for _ in range(50):
        words = body.split(" ")
        _swap_synonyms(words, rng)
        _swap_neighbours(words, rng)
        if rng.random() < 0.5:
            words = _with_discourse(words, rng)
        candidate = speaker + " ".join(words)
        if normalise(candidate) != normalise(text):
            return candidate
    raise RuntimeError(f"cannot paraphrase {text!r}")


def verbatim(text: str, rng: random.Random) -> str:
    """``text`` itself, or it up to case, spacing or final punctuation (the same after ``normalise``)."""
    roll = rng.random()
    if roll < 0.5:
        return text
    if roll < 0.7:
        return text.rstrip(".!?") if text[-1] in ".!?" else text + "."
    if roll < 0.85:
        words = text.split(" ")
        at = rng.randrange(1, len(words)) if len(words) > 1 else 0
        return " ".join(words[:at]) + "  " + " ".join(words[at:]) if at else text + " "
    return text.lower()


class _AgentBuilder:
    def __init__(self, rng: random.Random, seed: int, index: int) -> None:
        self.rng = rng
        self.seed = seed
        self.index = index
        self.counter = 0
        self.agent_id = str(uuid.uuid5(NAMESPACE, f"{seed}:agent:{index}"))
        self.memories: list[Memory] = []
        self.questions: list[Question] = []
        self.verbatim_pairs: list[tuple[str, str]] = []
        self.paraphrase_pairs: list[tuple[str, str]] = []
        self._seen: set[str] = set()
        user, partner = rng.sample(vocab.FIRST_NAMES, 2)
        self.profile = {
            "user": user, "partner": partner, "surname": rng.choice(vocab.SURNAMES),
            "agent": rng.choice(vocab.AGENT_NAMES), "role": rng.choice(vocab.AGENT_ROLES),
            "job": rng.choice(vocab.JOBS), "employer": rng.choice(vocab.EMPLOYERS),
            "home": rng.choice(vocab.POOLS["city"]),
            **{name: rng.choice(vocab.POOLS[name]) for name in ("nickname", "diet", "channel", "tz", "color", "language")},
        }
        self.agent = Agent(
            agent_id=self.agent_id, name=self.profile["agent"], user=user, partner=partner,
            directive=(f"You are {self.profile['agent']}, {user}'s {self.profile['role']}. Answer from the memories"
                       " below and say so when they do not hold the answer."))
        self.session_ages = sorted((rng.uniform(1.0, 365.0) for _ in range(SESSIONS)), reverse=True)

    def build(self, questions_per_agent: int) -> _AgentBuilder:
        core_questions = self._core_facts(min(CORE_QUESTIONS, questions_per_agent))
        frames = self._frames(questions_per_agent - core_questions)
        for topic, frame in frames:
            self._frame(topic, frame)
        for topic in sorted({topic.name: topic for topic, _ in frames}.values(), key=lambda t: t.name):
            for _ in range(self.rng.randint(*CHATTER_PER_TOPIC)):
                self._add(self._unique(lambda t=topic: self._turn(self._chatter(t))), "episodic", KIND_CHATTER,
                          topic.name)
        for _ in range(self.rng.randint(*FILLER_PER_AGENT)):
            self._add(self._unique(lambda: self._turn(self._filler())), "episodic", KIND_FILLER)
        self._copies()
        return self

    # --- facts and questions -------------------------------------------------------------------

    def _core_facts(self, questions: int) -> int:
        facts = self.rng.sample(vocab.CORE_FACTS, self.rng.randint(8, len(vocab.CORE_FACTS)))
        askable = [i for i, fact in enumerate(facts) if fact.lexical]
        asked = set(self.rng.sample(askable, min(questions, len(askable))))
        for i, fact in enumerate(facts):
            memory = self._add(self._unique(lambda f=fact: _fill(f.text, self.profile)), fact.category, KIND_CORE,
                               confidence=self.rng.uniform(0.95, 1.0), usefulness=self.rng.uniform(0.85, 0.95),
                               age_days=self.rng.uniform(5.0, 120.0))
            if i in asked:
                self._question((fact.lexical or "", fact.paraphrase or ""), self.profile, (memory.memory_id,), "core")
        return len(asked)

    def _frames(self, wanted: int) -> list[tuple[vocab.Topic, vocab.Frame]]:
        per_topic = len(vocab.TOPICS[0].frames)
        count = min(len(vocab.TOPICS), max(self.rng.randint(10, 15), -(-wanted // per_topic)))
        topics = self.rng.sample(vocab.TOPICS, count)
        frames = [(topic, frame) for topic in topics for frame in topic.frames]
        self.rng.shuffle(frames)
        return frames[:max(0, wanted)]

    def _frame(self, topic: vocab.Topic, frame: vocab.Frame) -> None:
        slots = self._slots(frame)
        sessions = sorted(self.rng.sample(range(SESSIONS), len(frame.statements)))
        evidence = []
        for statement, session in zip(frame.statements, sessions, strict=True):
            content = self._unique(lambda s=statement: self._turn(_fill(s, slots), speaker=self.profile["user"]))
            evidence.append(self._add(content, "episodic", KIND_ANSWER, topic.name, session=session).memory_id)
        self._question((frame.lexical, frame.paraphrase), slots, tuple(evidence), topic.name)
        if frame.key is not None:
            for _ in range(self.rng.randint(*NEAR_MISSES_PER_FRAME)):
                other = self._slots(frame, unlike=(frame.key, slots[frame.key]))
                statement = self.rng.choice(frame.statements)
                speaker = self.rng.choice((self.profile["user"], self.profile["partner"]))
                content = self._unique(lambda s=statement, o=other, p=speaker: self._turn(_fill(s, o), speaker=p))
                self._add(content, "episodic", KIND_NEAR_MISS, topic.name)

    def _question(self, phrasings: tuple[str, str], slots: dict[str, str], evidence: tuple[str, ...], topic: str) -> None:
        lexical = self.rng.random() < LEXICAL_SHARE
        text = _fill(phrasings[0] if lexical else phrasings[1], slots)
        self.questions.append(Question(
            question_id=f"{self.seed}:{self.index}:{len(self.questions)}", agent_id=self.agent_id, text=text,
            evidence=evidence, style="lexical" if lexical else "paraphrase", topic=topic))

    def _slots(self, frame: vocab.Frame, unlike: tuple[str, str] | None = None) -> dict[str, str]:
        names = sorted({name for text in (*frame.statements, frame.lexical, frame.paraphrase)
                        for name in _SLOT.findall(text)} - {"user", "partner"})
        slots = {"user": self.profile["user"], "partner": self.profile["partner"]}
        for name in names:
            base = name.rstrip("0123456789")
            for _ in range(100):
                value = self._draw(base)
                taken = {v for n, v in slots.items() if n.rstrip("0123456789") == base}
                if value not in taken and (unlike is None or unlike != (name, value)):
                    break
            slots[name] = value
        return slots

    def _draw(self, base: str) -> str:
        if base in vocab.GENERATED:
            return vocab.GENERATED[base](self.rng)
        return self.rng.choice(vocab.POOLS[base])

    # --- distractors and copies ----------------------------------------------------------------

    def _chatter(self, topic: vocab.Topic) -> str:
        w1, w2 = self.rng.sample(topic.words, 2)
        return self.rng.choice(vocab.CHATTER).format(w1=w1, w2=w2)

    def _filler(self) -> str:
        line = self.rng.choice(vocab.FILLER)
        return line + " " + self.rng.choice(vocab.FILLER_TAILS) if self.rng.random() < 0.4 else line

    def _copies(self) -> None:
        evidence = [m for m in self.memories if m.kind == KIND_ANSWER]
        others = [m for m in self.memories if m.kind in (KIND_CHATTER, KIND_FILLER, KIND_NEAR_MISS)]
        per_kind = max(1, round(COPIED_EVIDENCE_SHARE * len(evidence)))
        originals = self.rng.sample(evidence, min(len(evidence), 2 * per_kind))
        others_chosen = self.rng.sample(others, min(len(others), 2 * OTHER_COPIES))
        verbatim_set = originals[:per_kind] + others_chosen[:OTHER_COPIES]
        paraphrase_set = originals[per_kind:] + others_chosen[OTHER_COPIES:]
        for original in verbatim_set:
            copy = self._copy(original, verbatim(original.content, self.rng), KIND_VERBATIM, check_unique=False)
            self.verbatim_pairs.append((original.memory_id, copy.memory_id))
        for original in paraphrase_set:
            content = self._unique(lambda o=original: paraphrase(o.content, self.rng))
            copy = self._copy(original, content, KIND_PARAPHRASE)
            self.paraphrase_pairs.append((original.memory_id, copy.memory_id))

    def _copy(self, original: Memory, content: str, kind: str, *, check_unique: bool = True) -> Memory:
        younger = [age for age in self.session_ages if age < original.age_days]
        age = self.rng.choice(younger) if younger else original.age_days
        return self._add(content, original.category, kind, original.topic, confidence=original.confidence,
                         usefulness=original.usefulness, age_days=age - self.rng.uniform(0.0, 0.05),
                         check_unique=check_unique)

    # --- text and records ----------------------------------------------------------------------

    def _turn(self, sentence: str, *, speaker: str | None = None) -> str:
        """A dialog turn ``Speaker: ...`` of a drawn length, ``sentence`` among padding."""
        who = speaker or self.rng.choice((self.profile["user"], self.profile["partner"]))
        target = draw_words(self.rng)
        parts = [sentence]
        pool = [line for line in (*vocab.PADDING, *vocab.FILLER) if line != sentence]
        self.rng.shuffle(pool)
        words = len(sentence.split())
        while words < target and pool:
            extra = pool.pop()
            if words + len(extra.split()) > MAX_WORDS:
                continue
            parts.insert(self.rng.randint(0, len(parts)), extra)
            words += len(extra.split())
        return f"{who}: " + " ".join(parts)

    def _unique(self, make: Callable[[], str]) -> str:
        for _ in range(200):
            content = make()
            if normalise(content) not in self._seen:
                return content
        raise RuntimeError("the vocabulary is too small to draw a new distinct memory")

    def _add(self, content: str, category: str, kind: str, topic: str = "", *, session: int | None = None,
             confidence: float | None = None, usefulness: float | None = None, age_days: float | None = None,
             check_unique: bool = True) -> Memory:
        key = normalise(content)
        if check_unique and key in self._seen:
            raise RuntimeError(f"duplicate content drawn: {content!r}")
        self._seen.add(key)
        if age_days is None:
            at = self.rng.randrange(SESSIONS) if session is None else session
            age_days = self.session_ages[at] - self.rng.randint(0, 90) * 2.0 / 1440.0
        memory = Memory(
            memory_id=str(uuid.uuid5(NAMESPACE, f"{self.seed}:{self.index}:{self.counter}")), agent_id=self.agent_id,
            content=content, category=category,
            confidence=round(self.rng.uniform(0.7, 1.0), 3) if confidence is None else round(confidence, 3),
            usefulness=round(self.rng.uniform(0.3, 0.7), 3) if usefulness is None else round(usefulness, 3),
            age_days=round(age_days, 6), kind=kind, topic=topic)
        self.counter += 1
        self.memories.append(memory)
        return memory


def _fill(template: str, slots: dict[str, str]) -> str:
    return template.format_map(slots)


def _split_speaker(text: str) -> tuple[str, str]:
    head, sep, body = text.partition(": ")
    return (head + sep, body) if sep and " " not in head else ("", text)


def _swap_synonyms(words: list[str], rng: random.Random) -> None:
    reverse = {v: k for k, v in vocab.SYNONYMS.items() if " " not in v}
    spots = [i for i, w in enumerate(words) if w in vocab.SYNONYMS or w in reverse]
    for i in rng.sample(spots, min(len(spots), rng.randint(1, 2))):
        words[i] = vocab.SYNONYMS.get(words[i]) or reverse[words[i]]


def _swap_neighbours(words: list[str], rng: random.Random) -> None:
    spots = [i for i in range(1, len(words) - 1) if _plain(words[i]) and _plain(words[i + 1])]
    if spots:
        i = rng.choice(spots)
        words[i], words[i + 1] = words[i + 1], words[i]


def _with_discourse(words: list[str], rng: random.Random) -> list[str]:
    first = words[0]
    if first in ("The", "My", "Our", "We", "It", "This", "That", "Not", "No", "Did"):
        first = first.lower()
    return [rng.choice(vocab.DISCOURSE).rstrip(), first, *words[1:]]


def _plain(word: str) -> bool:
    return word.isalpha() and word.islower()


def kinds(memories: Iterable[Memory]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for memory in memories:
        counts[memory.kind] = counts.get(memory.kind, 0) + 1
    return dict(sorted(counts.items()))
