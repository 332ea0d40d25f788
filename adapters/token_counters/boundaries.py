"""Safe boundaries: positions no pre-tokenizer piece of o200k_base or cl100k_base can cross.

tiktoken first cuts text into pieces with a regex, then runs BPE inside each piece. If no piece
crosses a position p, and text[:p] alone is cut into the same pieces, then the tokens of the text
are the tokens of text[:p] followed by those of text[p:]: counts add up exactly. Two kinds of p
qualify, for both encodings:

Line boundary: text[p-1] is "\\r" or "\\n", text[p] is not "/", and the run of non-newline
whitespace starting at p ends at a non-space (so it holds no newline and does not reach the end).

* Word, digit and contraction pieces never contain a newline (their optional lead excludes
  "\\r\\n"), so any of them that starts before p ends by p-1.
* A punctuation piece swallows the newlines after it (cl100k ``[\\r\\n]*+``; o200k ``[\\r\\n/]*``,
  which also swallows "/"). It stops at text[p], which is neither a newline nor "/".
* A whitespace piece that starts before p and holds the newline at p-1 is ``\\s*[\\r\\n]`` /
  ``\\s*[\\r\\n]+``: it backtracks to the last newline of its run, so it ends at p. cl100k's
  earlier ``\\s++$`` cannot match it, because a non-space follows the run.
* Alone, text[:p] ends with that newline; there ``\\s++$`` (cl100k) yields the same piece as
  ``\\s*[\\r\\n]`` did, and no other alternative looks past its piece. text[p:] is scanned as in
  the whole text (neither regex has a lookbehind).

Space boundary: text[p-1] is not whitespace and text[p] is " ". No alternative puts whitespace
after a non-space except a punctuation piece's trailing newlines; a space piece starts at p; and
text[:p] ends with a non-space, so ``$`` and ``(?!\\S)`` decide nothing differently there.

Python's ``\\s`` / ``str.isspace`` is a superset of the Rust regex's Unicode White_Space (it adds
\\x1c-\\x1f). Every test below asks "is it space?" in the direction where the superset can only
skip a boundary, never invent one.
"""

from __future__ import annotations

import re

_LINE_BOUNDARY = re.compile(r"(?<=[\r\n])(?!/)(?=[^\S\r\n]*\S)")


def split_lines(text: str) -> list[str]:
    """Split ``text`` at every line boundary (see the module docstring); "" stays [""]."""
    if "\r" in text:
        return _LINE_BOUNDARY.split(text)
    parts = text.split("\n")
    chunks: list[str] = []
    current = parts[0]
    for part in parts[1:]:
        current += "\n"
        if part and part[0] != "/" and not part.isspace():
            chunks.append(current)
            current = part
        else:
            current += part
    chunks.append(current)
    return chunks


def split_lines_by_regex(text: str) -> list[str]:
    """The regex statement of :func:`split_lines` (same result; slower without a "\\r")."""
    return _LINE_BOUNDARY.split(text)


def split_words(text: str) -> list[str]:
    """Split ``text`` before every space that follows a non-space character."""
    parts = text.split(" ")
    pieces: list[str] = []
    current = parts[0]
    for part in parts[1:]:
        if current and not current[-1].isspace():
            pieces.append(current)
            current = " " + part
        else:
            current += " " + part
    pieces.append(current)
    return pieces
