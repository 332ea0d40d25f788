"""Exact token counters against plain tiktoken, the safe-boundary splitting, and the registry.

The reference encodings are built from tiktoken's own published definitions
(tiktoken_ext.openai_public: split regex and special tokens), fed with the vocabulary files of
the bpe-openai wheel after checking them against OpenAI's published SHA-256. They share no code
with the adapter: no cache, no chunking.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import itertools
import subprocess
import sys
import threading
import unicodedata
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest
import tiktoken
import tiktoken.load
from hypothesis import given, settings
from hypothesis import strategies as st
from tiktoken_ext import openai_public

from adapters.token_counters import TokenCountersRegistry
from domain.layout import frame
from adapters.token_counters.boundaries import split_lines, split_lines_by_regex, split_words
from adapters.token_counters.exact import (
    ENCODING_SPECS,
    PROCESS_ENCODINGS,
    EncodingStore,
    ExactTokenCounter,
    build_encoding,
    parse_mergeable_ranks,
)
from domain.model.errors import UnsupportedEstimateKindError

KINDS = {"o200k_base": "exact_o200k_base", "cl100k_base": "exact_cl100k_base"}
ENCODINGS = tuple(KINDS)

# Unicode White_Space (PropList.txt): what the Rust regex engine's \s matches.
UNICODE_WHITE_SPACE = [*range(0x09, 0x0E), 0x20, 0x85, 0xA0, 0x1680, *range(0x2000, 0x200B)]
UNICODE_WHITE_SPACE += [0x2028, 0x2029, 0x202F, 0x205F, 0x3000]

CORPUS = {
    "prose": "The quick brown fox jumps over the lazy dog. It's 2024, and we've shipped v1.2.3!\n",
    "code": 'def f(x):\n    return {"a": [1, 2, 3]}  # comment\n\n\nclass A:\n\tpass\n',
    "json": '{"id": "3f1c-9", "tags": ["a", "b"], "n": 12345678, "nested": {"k": null}}\n',
    "cjk": "日本語のテキストです。\n中文文本，包含标点。\n한국어 문장입니다.\n",
    "emoji": "👍🏽 great 🎉🎉\n👨‍👩‍👧 family\n",
    "newlines": "a\n\nb\r\n\r\nc\rd\n \n  e\n\t\nf\n/g\n /h\n.\n/i\n",
    "slashes": "path/to/file\n//comment\n/*block*/\n.\n//\n:\n/x\nhttps://example.com/a/b\n",
    "trailing_space": "line one\n  \n   ",
    "unicode_space": "a\u00a0\nb\u2028\nc\x85\nd\x1c\ne\u3000\n\u2029f\n\x1c\n\x1f g",
    "special_tokens": "<|endoftext|> hi <|endofprompt|>\n<|fim_prefix|>x<|fim_suffix|>",
    "memory": (
        '<ibex_memory nonce="Zx8Qa1Lm0Pq2Rs3Tu4Vw5X" id="0b5c" category="factual">\n'
        "User likes tea.\n</ibex_memory>\n"
    ),
    "long_line": ("lorem ipsum dolor sit amet " * 400) + "\nend\n",
    "many_lines": "".join(f"item {i}: value/{i * 7}\n" for i in range(300)),
    "contractions": "I'M sure they'LL say it's fine\nDON'T\n'S\n",
}

FRAGMENTS = [
    "\n", "\r\n", "\r", " ", "  ", "\t", "/", "//", ".", ",", "!?", "'s", "'LL", "-", "\"", ":", "{", "}",
    "\u00a0", "\u2028", "\u2029", "\x85", "\x1c", "\x1f", "\u3000", "\x0b", "\x0c",
    "a", "word", "Word", "WORD",
    "123", "4567", "é", "日本", "😀", "<|endoftext|>", "\n/", ".\n/", " \n", "\n ", "\n\n", "x\n",
]


@pytest.fixture(scope="session")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tiktoken.Encoding]:
    """Plain tiktoken encodings from tiktoken's own definitions over the bpe-openai vocabularies."""
    tmp_dir = tmp_path_factory.mktemp("vocabularies")
    # Located without importing bpe_openai, whose import builds its own registry of every vocabulary.
    package_spec = importlib.util.find_spec("bpe_openai")
    assert package_spec is not None and package_spec.submodule_search_locations
    vocabulary_dir = Path(package_spec.submodule_search_locations[0]) / "data"

    def load_checked(url: str, expected_hash: str) -> dict[bytes, int]:
        name = url.rsplit("/", 1)[-1]
        data = gzip.decompress((vocabulary_dir / (name + ".gz")).read_bytes())
        assert hashlib.sha256(data).hexdigest() == expected_hash, f"{name} is not OpenAI's published file"
        path = tmp_dir / name
        path.write_bytes(data)
        return tiktoken.load.load_tiktoken_bpe(str(path))

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TIKTOKEN_CACHE_DIR", "")
        patch.setattr(openai_public, "load_tiktoken_bpe", load_checked)
        return {name: tiktoken.Encoding(**getattr(openai_public, name)()) for name in ENCODINGS}


@pytest.fixture(scope="session")
def registry() -> TokenCountersRegistry:
    counters = TokenCountersRegistry()
    counters.preload()
    return counters


def _counter(registry: TokenCountersRegistry, name: str) -> ExactTokenCounter:
    counter = registry.for_kind(KINDS[name])
    assert isinstance(counter, ExactTokenCounter)
    return counter


def _tokens_by_chunk(encoding: tiktoken.Encoding, text: str) -> list[int]:
    chunks = (word for line in split_lines(text) for word in split_words(line))
    return [token for chunk in chunks for token in encoding.encode_ordinary(chunk)]


def _assert_exact(
    registry: TokenCountersRegistry, reference: dict[str, tiktoken.Encoding], text: str
) -> None:
    for name in ENCODINGS:
        expected = reference[name].encode_ordinary(text)
        assert _tokens_by_chunk(reference[name], text) == expected, (name, text)
        assert _counter(registry, name).count(text) == len(expected), (name, text)


@pytest.mark.parametrize("name", ENCODINGS)
def test_our_split_regex_and_vocabulary_equal_tiktokens_published_encoding(
    reference: dict[str, tiktoken.Encoding], name: str
) -> None:
    ours = PROCESS_ENCODINGS.get(ENCODING_SPECS[KINDS[name]])
    theirs = reference[name]
    assert ours.n_vocab == theirs.n_vocab
    assert ours._special_tokens == theirs._special_tokens
    for text in CORPUS.values():
        assert ours.encode_ordinary(text) == theirs.encode_ordinary(text)


@pytest.mark.parametrize("name", ENCODINGS)
def test_hello_world_is_two_tokens(registry: TokenCountersRegistry, name: str) -> None:
    assert _counter(registry, name).count("hello world") == 2


def test_known_token_ids_of_hello_world(reference: dict[str, tiktoken.Encoding]) -> None:
    assert reference["o200k_base"].encode_ordinary("hello world") == [24912, 2375]
    assert reference["cl100k_base"].encode_ordinary("hello world") == [15339, 1917]


@pytest.mark.parametrize("name", ENCODINGS)
def test_empty_text_is_zero_tokens(registry: TokenCountersRegistry, name: str) -> None:
    assert _counter(registry, name).count("") == 0


@pytest.mark.parametrize("label", CORPUS)
def test_counts_equal_plain_tiktoken_on_the_corpus(
    registry: TokenCountersRegistry, reference: dict[str, tiktoken.Encoding], label: str
) -> None:
    _assert_exact(registry, reference, CORPUS[label])
    _assert_exact(registry, reference, CORPUS[label])  # second pass is served by the cache


def test_special_token_text_counts_as_ordinary_text(
    registry: TokenCountersRegistry, reference: dict[str, tiktoken.Encoding]
) -> None:
    for name in ENCODINGS:
        counted = _counter(registry, name).count("<|endoftext|>")
        assert counted == len(reference[name].encode_ordinary("<|endoftext|>")) > 1


def test_lone_surrogates_are_counted_not_raised(
    registry: TokenCountersRegistry, reference: dict[str, tiktoken.Encoding]
) -> None:
    text = "bad \ud800 pair\n\udfff end \ud83d\ude00"
    for name in ENCODINGS:
        assert _counter(registry, name).count(text) == len(reference[name].encode_ordinary(text))


@st.composite
def tricky_text(draw: st.DrawFn) -> str:
    pieces = draw(
        st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=4), st.characters()), max_size=40)
    )
    return "".join(pieces)


@settings(max_examples=400, deadline=None)
@given(text=tricky_text())
def test_counts_equal_plain_tiktoken_on_generated_text(
    registry: TokenCountersRegistry, reference: dict[str, tiktoken.Encoding], text: str
) -> None:
    _assert_exact(registry, reference, text)


@settings(max_examples=150, deadline=None)
@given(text=st.text(alphabet=st.sampled_from(" \t\n\r/.a'\u00a0\u2028\x85\x1c"), max_size=30))
def test_counts_equal_plain_tiktoken_on_whitespace_heavy_text(
    registry: TokenCountersRegistry, reference: dict[str, tiktoken.Encoding], text: str
) -> None:
    _assert_exact(registry, reference, text)


def _all_strings(alphabet: str, max_length: int) -> Iterator[str]:
    for length in range(1, max_length + 1):
        for letters in itertools.product(alphabet, repeat=length):
            yield "".join(letters)


def test_every_short_string_over_the_boundary_alphabet_counts_exactly(
    registry: TokenCountersRegistry, reference: dict[str, tiktoken.Encoding]
) -> None:
    for text in _all_strings("a \n\r/.\u00a0\x1c", 5):
        _assert_exact(registry, reference, text)


def test_whitespace_and_control_characters_around_newlines_count_exactly(
    registry: TokenCountersRegistry, reference: dict[str, tiktoken.Encoding]
) -> None:
    categories = {"Zs", "Zl", "Zp", "Cc", "Cf"}
    for char in (chr(c) for c in range(0x110000) if unicodedata.category(chr(c)) in categories):
        for text in (f"x\n{char}\n y", f"x.\n{char}/z\n", f"a\n{char}\n", f"a{char} b\n{char}"):
            _assert_exact(registry, reference, text)


def test_rust_whitespace_is_python_whitespace_so_boundaries_are_never_invented() -> None:
    assert all(chr(c).isspace() for c in UNICODE_WHITE_SPACE)


@settings(max_examples=300, deadline=None)
@given(text=tricky_text())
def test_line_split_matches_its_regex_statement_and_loses_nothing(text: str) -> None:
    assert "".join(split_lines(text)) == text
    assert "".join(split_words(text)) == text
    assert split_lines(text) == split_lines_by_regex(text)


def test_lines_split_after_the_last_newline_of_a_run_but_not_before_a_slash() -> None:
    assert split_lines("a\n\n  b\nc") == ["a\n\n", "  b\n", "c"]
    assert split_lines("a\n/b\n /c") == ["a\n/b\n", " /c"]
    assert split_lines("a\n  \n") == ["a\n  \n"]
    assert split_lines("a\r\nb") == ["a\r\n", "b"]
    assert split_words('<m nonce="x"  id="y">') == ["<m", ' nonce="x"', '  id="y">']


def test_repeated_text_is_served_from_the_cache(reference: dict[str, tiktoken.Encoding]) -> None:
    counter = ExactTokenCounter("exact_o200k_base", PROCESS_ENCODINGS.get(ENCODING_SPECS["exact_o200k_base"]))
    text = CORPUS["memory"] + CORPUS["code"]
    first = counter.count(text)
    misses = counter.cache_stats().misses
    assert counter.count(text) == first == len(reference["o200k_base"].encode_ordinary(text))
    assert counter.cache_stats().misses == misses
    assert counter.cache_stats().hits > 0


def test_cache_is_bounded_and_long_chunks_bypass_it(reference: dict[str, tiktoken.Encoding]) -> None:
    encoding = PROCESS_ENCODINGS.get(ENCODING_SPECS["exact_cl100k_base"])
    counter = ExactTokenCounter("exact_cl100k_base", encoding, cache_entries=8, max_cached_chunk_chars=64)
    for i in range(100):
        text = f"line {i} of many\nsecond {i * i}\n"
        assert counter.count(text) == len(reference["cl100k_base"].encode_ordinary(text))
    assert counter.cache_stats().size <= 8
    before = counter.cache_stats()
    long_text = "x" * 65
    assert counter.count(long_text) == len(reference["cl100k_base"].encode_ordinary(long_text))
    assert counter.cache_stats() == before


@pytest.mark.parametrize("kind", ["exact_o200k_base", "exact_cl100k_base", "chars_div_4", "runes_div_3_5"])
def test_registry_serves_every_kind_once(registry: TokenCountersRegistry, kind: str) -> None:
    counter = registry.for_kind(kind)
    assert counter.kind == kind
    assert registry.for_kind(kind) is counter


def test_unknown_estimate_kind_is_rejected_naming_it(registry: TokenCountersRegistry) -> None:
    with pytest.raises(UnsupportedEstimateKindError, match="exact_llama3"):
        registry.for_kind("exact_llama3")


def test_vocabularies_load_once_per_process_across_registries_and_threads() -> None:
    registries = [TokenCountersRegistry() for _ in range(4)]
    threads = [threading.Thread(target=r.preload) for r in registries]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert PROCESS_ENCODINGS.load_count("o200k_base") == 1
    assert PROCESS_ENCODINGS.load_count("cl100k_base") == 1


def test_a_store_builds_an_encoding_once_under_concurrent_first_use() -> None:
    store = EncodingStore()
    spec = ENCODING_SPECS["exact_cl100k_base"]
    got: list[tiktoken.Encoding] = []
    threads = [threading.Thread(target=lambda: got.append(store.get(spec))) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert store.load_count("cl100k_base") == 1
    assert len(got) == 6 and all(encoding is got[0] for encoding in got)


def test_loading_vocabularies_does_not_import_the_bpe_openai_native_module() -> None:
    probe = (
        "import sys; from adapters.token_counters import TokenCountersRegistry;"
        "TokenCountersRegistry().preload(); print('bpe_openai' in sys.modules)"
    )
    run = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    assert run.stdout.strip() == "False"


def test_a_missing_vocabulary_file_is_an_unsupported_kind_naming_the_file() -> None:
    spec = attrs.evolve(ENCODING_SPECS["exact_o200k_base"], vocabulary_file="o300k_base.tiktoken.gz")
    with pytest.raises(UnsupportedEstimateKindError, match="exact_o200k_base.*o300k_base.tiktoken.gz"):
        build_encoding(spec)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"IQ== 0\nnot-base64! 1\n", "line 2"),
        (b"IQ== 0\nIg== x\n", "line 2"),
        (b"IQ== 0\nIg== 2\n", "not exactly 0..1"),
    ],
)
def test_malformed_vocabulary_lines_are_named(content: bytes, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_mergeable_ranks(content)


joined_parts = st.lists(
    st.one_of(st.sampled_from(FRAGMENTS), st.text(alphabet=st.sampled_from(" \t\n\r/.a'\u00a0\x1c<>\"="), max_size=8)),
    max_size=12,
)


@settings(max_examples=300, deadline=None)
@given(head=joined_parts, rests=st.lists(joined_parts, max_size=5))
def test_count_each_equals_the_count_of_each_text(
    registry: TokenCountersRegistry, reference: dict[str, tiktoken.Encoding], head: list[str], rests: list[list[str]]
) -> None:
    """Texts that share a head (where count_each counts the head once) and texts that do not."""
    texts = ["".join(head) + "".join(rest) for rest in rests]
    for name in ENCODINGS:
        expected = tuple(len(reference[name].encode_ordinary(text)) for text in texts)
        assert _counter(registry, name).count_each(texts) == expected, (name, texts)
    for kind in ("chars_div_4", "runes_div_3_5"):
        counter = registry.for_kind(kind)
        assert counter.count_each(texts) == tuple(counter.count(text) for text in texts)


def test_count_each_on_memory_elements_and_the_block_match_the_tokenizer(
    registry: TokenCountersRegistry, reference: dict[str, tiktoken.Encoding]
) -> None:
    bodies = ["body one", "/slash first", "  indented", "\nblank first", "ends in space ", "last"]
    for nonce in ("Zq81", "123", "a", "9xY0aBcD3eFgH1iJ2k", "Ab12Cd34"):
        block = frame(nonce, "Be brief.", (), ('{"t": 1}',))
        elements = [block.element(f'm"{i}', "fact&ual", body) for i, body in enumerate(bodies)]
        text = block.render(elements)
        for name in ENCODINGS:
            counter = _counter(registry, name)
            expected = tuple(len(reference[name].encode_ordinary(e.text)) for e in elements)
            assert counter.count_each([e.text for e in elements]) == expected, (name, nonce)
            assert counter.count(text) == len(reference[name].encode_ordinary(text)), (name, nonce)
