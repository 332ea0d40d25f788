"""Texts of the demo tenant's memories (the load and floor benchmarks' stand-in).

Two corpora, both relevant to the benchmarks' query (every memory carries query words, so every
candidate passes the relevance floor and reaches the packer):

* ``varied`` (the default): short dialog-like notes, each two query words among words drawn from
  a vocabulary of a few hundred everyday and work words plus a few stop words, so memories
  overlap the way an agent's notes do: a handful of shared words, rarely most of them;
* ``narrow``: every memory is 12 words drawn from the same 16, so any two share most of their
  terms. No agent's memories look like this; it is the worst case of the near-duplicate gate
  (prefix filtering prunes nothing) and is kept to measure that case.
"""

from __future__ import annotations

import random

CORPORA = ("varied", "narrow")
QUERY_WORDS = ("dark", "theme", "python", "deploy", "budget", "weekly", "report")
NARROW_WORDS = ("dark", "mode", "theme", "python", "deploy", "budget", "weekly", "report", "coffee",
                "meeting", "invoice", "travel", "latency", "cache", "review", "friday")
_STOP = ("the", "a", "to", "and", "on", "for", "we", "it", "is", "in", "of", "with", "after", "before")
_VOCABULARY = tuple("""
account agenda airport album alert allergy analytics appointment approval archive audit author backlog
backup baking bandwidth bank basket battery beach benchmark bill birthday boiler booking bookshop
branch bread brother browser bucket calendar camera campaign canary capacity cardio catalog checkout
checkup choir cleaning client clinic cluster coach colleague compiler compost concert config contract
cookbook course credential customer dashboard database deadline dentist dependency designer dinner
doctor domain draft driver editor election email employee engineer estimate export failover feature
festival filter firewall flight forecast founder garden gateway grocery gym handover headline hiking
holiday hotel incident index insurance interview inventory invoice kernel keyboard kitchen ladder
laptop latency launch lease library license lunch manager manual margin market meeting mentor
metric migration mobile module mortgage museum network newsletter notebook office onboarding outage
package painting parking partner passport patch payroll pension pharmacy pipeline plumber podcast
policy portal postgres pricing printer project proposal prototype quarter queue quota receipt recipe
refund release rental replica repository request research restaurant retro review roadmap router
runbook salary schedule schema screen script security server session shipment signup sister sprint
staging storage subscription supplier survey tablet teacher template tenant ticket timeline token
tournament training transfer travel upgrade vacation vendor version video visa warehouse webhook
website wedding widget workshop
""".split())


def demo_text(corpus: str, rng: random.Random) -> str:
    """One memory's words (without its ``memory i:`` prefix), drawn from ``rng``."""
    if corpus == "narrow":
        return " ".join(rng.choice(NARROW_WORDS) for _ in range(12))
    if corpus != "varied":
        raise ValueError(f"unknown corpus {corpus!r} (known: {', '.join(CORPORA)})")
    words = [*rng.sample(QUERY_WORDS, 2), *rng.sample(_VOCABULARY, rng.randint(6, 12)),
             *rng.sample(_STOP, rng.randint(2, 5))]
    rng.shuffle(words)
    return " ".join(words)
