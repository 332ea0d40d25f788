"""Exact o200k_base / cl100k_base counts: tiktoken's BPE over the vocabularies in the bpe-openai wheel.

The vocabulary files ship inside the ``bpe-openai`` wheel (``bpe_openai/data/*.tiktoken.gz``:
gzip text, one ``<base64 token> <rank>`` per line); nothing is downloaded. Each encoding is built
at most once per process (:data:`PROCESS_ENCODINGS`).

Counting cuts the text at *safe boundaries* and counts each chunk through a bounded LRU cache;
the sum equals the tokenizer's count of the whole text (see :mod:`.boundaries`). Pricing many
texts at once (:meth:`ExactTokenCounter.count_each`) counts the head they share once.
"""

from __future__ import annotations

import base64
import functools
import gzip
import importlib.util
import os
import threading
from collections import Counter
from collections.abc import Sequence
from importlib import resources
from importlib.resources.abc import Traversable

import attrs
import tiktoken

from domain.model.errors import UnsupportedEstimateKindError
from ports.token_counter import TokenCounter

from .boundaries import split_lines, split_words

EXACT_O200K_BASE = "exact_o200k_base"
EXACT_CL100K_BASE = "exact_cl100k_base"
VOCABULARY_DISTRIBUTION_PACKAGE = "bpe_openai"
VOCABULARY_PACKAGE = "bpe_openai.data"

# Split ("pre-tokenizer") regexes: the public definitions of the two encodings, in fancy-regex syntax.
_LEAD = r"[^\r\n\p{L}\p{N}]?"  # one optional non-letter, non-digit, non-newline before a word
_UPPERISH = r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]"
_LOWERISH = r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]"
_CONTRACTION = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
O200K_BASE_PATTERN = "|".join(
    (
        _LEAD + _UPPERISH + "*" + _LOWERISH + "+" + _CONTRACTION,  # lower- or title-case word
        _LEAD + _UPPERISH + "+" + _LOWERISH + "*" + _CONTRACTION,  # upper-case word
        r"\p{N}{1,3}",  # digits, at most three per piece
        r" ?[^\s\p{L}\p{N}]+[\r\n/]*",  # punctuation run, then newlines and slashes
        r"\s*[\r\n]+",  # whitespace through the last newline of a run
        r"\s+(?!\S)",  # whitespace, leaving one before a word
        r"\s+",
    )
)
CL100K_BASE_PATTERN = "|".join(
    (
        r"'(?i:[sdmt]|ll|ve|re)",  # English contraction
        r"[^\r\n\p{L}\p{N}]?+\p{L}++",  # word with one optional leading non-letter
        r"\p{N}{1,3}+",  # digits, at most three per piece
        r" ?[^\s\p{L}\p{N}]++[\r\n]*+",  # punctuation run, then newlines
        r"\s++$",  # whitespace that ends the text
        r"\s*[\r\n]",  # whitespace through the last newline of a run
        r"\s+(?!\S)",  # whitespace, leaving one before a word
        r"\s",
    )
)


@attrs.frozen
class EncodingSpec:
    kind: str
    name: str
    vocabulary_file: str
    pattern: str
    special_tokens: tuple[tuple[str, int], ...]


ENCODING_SPECS: dict[str, EncodingSpec] = {
    EXACT_O200K_BASE: EncodingSpec(
        kind=EXACT_O200K_BASE,
        name="o200k_base",
        vocabulary_file="o200k_base.tiktoken.gz",
        pattern=O200K_BASE_PATTERN,
        special_tokens=(("<|endoftext|>", 199999), ("<|endofprompt|>", 200018)),
    ),
    EXACT_CL100K_BASE: EncodingSpec(
        kind=EXACT_CL100K_BASE,
        name="cl100k_base",
        vocabulary_file="cl100k_base.tiktoken.gz",
        pattern=CL100K_BASE_PATTERN,
        special_tokens=(
            ("<|endoftext|>", 100257),
            ("<|fim_prefix|>", 100258),
            ("<|fim_middle|>", 100259),
            ("<|fim_suffix|>", 100260),
            ("<|endofprompt|>", 100276),
        ),
    ),
}


def parse_mergeable_ranks(content: bytes) -> dict[bytes, int]:
    """Parse ``<base64 token> <rank>`` lines; ranks must be exactly 0..n-1.

    Raises:
        ValueError: naming the first malformed line, or the rank set is not dense.
    """
    ranks: dict[bytes, int] = {}
    for number, line in enumerate(content.splitlines(), start=1):
        if not line:
            continue
        token, _, rank = line.partition(b" ")
        try:
            ranks[base64.b64decode(token, validate=True)] = int(rank)
        except ValueError as e:
            raise ValueError(f"line {number} is not '<base64 token> <rank>': {line[:60]!r}") from e
    if set(ranks.values()) != set(range(len(ranks))):
        raise ValueError(f"ranks of {len(ranks)} tokens are not exactly 0..{len(ranks) - 1}")
    return ranks


def vocabulary_directory() -> Traversable:
    """The ``bpe_openai/data`` resource directory, found without running ``bpe_openai/__init__``.

    Importing ``bpe_openai`` loads its 74 MB native library and builds its own registry of every
    vocabulary (about 0.9 s and 66 MB of RSS, measured), none of which we use; the package's
    resource reader gives the data files alone.
    """
    spec = importlib.util.find_spec(VOCABULARY_DISTRIBUTION_PACKAGE)
    if spec is None:
        raise ImportError(f"package {VOCABULARY_DISTRIBUTION_PACKAGE!r} (bpe-openai) is not installed")
    get_reader = getattr(spec.loader, "get_resource_reader", None)
    reader = get_reader(spec.name) if get_reader is not None else None
    if reader is None or not hasattr(reader, "files"):
        return resources.files(VOCABULARY_PACKAGE)
    return reader.files().joinpath("data")


def read_mergeable_ranks(vocabulary_file: str) -> dict[bytes, int]:
    """Read one gzip vocabulary file shipped in the bpe-openai wheel."""
    compressed = vocabulary_directory().joinpath(vocabulary_file).read_bytes()
    return parse_mergeable_ranks(gzip.decompress(compressed))


def build_encoding(spec: EncodingSpec) -> tiktoken.Encoding:
    """Build the tiktoken encoding for ``spec`` (about a second; callers go through a store).

    Raises:
        UnsupportedEstimateKindError: the vocabulary cannot be read or parsed (names the file).
    """
    try:
        ranks = read_mergeable_ranks(spec.vocabulary_file)
        return tiktoken.Encoding(
            name=spec.name,
            pat_str=spec.pattern,
            mergeable_ranks=ranks,
            special_tokens=dict(spec.special_tokens),
        )
    except (ImportError, OSError, EOFError, ValueError) as e:
        raise UnsupportedEstimateKindError(
            f"estimate kind '{spec.kind}': cannot load vocabulary"
            f" {VOCABULARY_PACKAGE}/{spec.vocabulary_file}: {e}"
        ) from e


class EncodingStore:
    """Builds each encoding at most once, lazily, safely under concurrent first use."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._encodings: dict[str, tiktoken.Encoding] = {}
        self._loads: Counter[str] = Counter()

    def get(self, spec: EncodingSpec) -> tiktoken.Encoding:
        encoding = self._encodings.get(spec.name)
        if encoding is not None:
            return encoding
        with self._lock:
            encoding = self._encodings.get(spec.name)
            if encoding is None:
                encoding = build_encoding(spec)
                self._loads[spec.name] += 1
                self._encodings[spec.name] = encoding
        return encoding

    def load_count(self, name: str) -> int:
        """How many times the vocabulary ``name`` (e.g. "o200k_base") has been built by this store."""
        return self._loads[name]


def shared_head_length(texts: Sequence[str]) -> int:
    """The length of a head every text starts with and ends at a space boundary of each (0: none).

    The last space boundary inside the texts' common prefix: ``text[p - 1]`` is not whitespace
    and ``text[p]`` is " ", both inside the prefix, so the position is a boundary of every text.
    """
    prefix = os.path.commonprefix((min(texts), max(texts)))
    p = prefix.rfind(" ")
    while p > 0 and prefix[p - 1].isspace():
        p = prefix.rfind(" ", 0, p)
    return max(p, 0)


PROCESS_ENCODINGS = EncodingStore()
"""The one store of the process: vocabularies are immutable, so every registry shares them."""


@attrs.frozen
class ChunkCacheStats:
    hits: int
    misses: int
    size: int


class ExactTokenCounter(TokenCounter):
    """The tokenizer's own count of ``text`` (special-token text counts as ordinary text).

    The text is cut at safe line boundaries (:mod:`.boundaries`); each line's count comes from a
    bounded LRU cache. A short line (at most ``word_split_max_spaces`` spaces, e.g. a memory's
    opening tag with its per-request nonce) is counted word by word instead, so only the word that
    changed is encoded again. Chunks longer than ``max_cached_chunk_chars`` bypass the cache.
    """

    def __init__(
        self,
        kind: str,
        encoding: tiktoken.Encoding,
        cache_entries: int = 50_000,
        max_cached_chunk_chars: int = 4096,
        word_split_max_spaces: int = 4,
        text_cache_entries: int = 8192,
    ) -> None:
        self._kind = kind
        self._encode = encoding.encode_ordinary
        self._max_cached_chunk_chars = max_cached_chunk_chars
        self._word_split_max_spaces = word_split_max_spaces
        self._cached_count = functools.lru_cache(maxsize=cache_entries)(self._encode_count)
        self._cached_text_count = functools.lru_cache(maxsize=text_cache_entries)(self._count_uncached)

    @property
    def kind(self) -> str:
        return self._kind

    def count(self, text: str) -> int:
        if not text:
            return 0
        if len(text) <= self._max_cached_chunk_chars:
            return self._cached_text_count(text)
        return self._count_uncached(text)

    def count_each(self, texts: Sequence[str]) -> tuple[int, ...]:
        """Per-text counts. Texts that share a head (memory elements share the tag with the
        assembly's nonce) count it once; each one's rest is what repeats across calls."""
        count = self.count
        cut = shared_head_length(texts) if len(texts) > 1 else 0
        if not cut:
            return tuple([count(text) for text in texts])
        head = count(texts[0][:cut])
        return tuple([head + count(text[cut:]) for text in texts])

    def cache_stats(self) -> ChunkCacheStats:
        """Hits and misses of the caches (a whole-text hit counts as a hit; a whole-text miss falls
        through to the chunk cache, where it is counted) and the size of the chunk cache."""
        chunks = self._cached_count.cache_info()
        texts = self._cached_text_count.cache_info()
        return ChunkCacheStats(hits=chunks.hits + texts.hits, misses=chunks.misses, size=chunks.currsize)

    def _count_uncached(self, text: str) -> int:
        cached = self._cached_count
        longest = self._max_cached_chunk_chars
        split_at = self._word_split_max_spaces
        total = 0
        for line in split_lines(text):
            spaces = line.count(" ")
            if len(line) > longest:
                total += self._encode_count(line)
            elif 0 < spaces <= split_at:
                for word in split_words(line):
                    total += cached(word)
            else:
                total += cached(line)
        return total

    def _encode_count(self, chunk: str) -> int:
        return len(self._encode(chunk))
