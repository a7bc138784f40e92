"""Language of the words in a chain of thought, by Unicode script.

R1's language-consistency reward is the share of chain-of-thought words in the target language.
English vs Chinese needs only the script: each CJK character counts as one word, each Latin word
as one word, numbers and symbols are neutral. Latin-script languages other than English need a
language identifier (lingua), loaded only when a caller asks for one of them.
"""

from __future__ import annotations

import re
from functools import lru_cache

_TAGS = re.compile(r"</?(think|answer)>")
_THINK = re.compile(r"<think>(.*?)(?:</think>|$)", re.DOTALL)
_WORD = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]|[^\W\d_]+", re.UNICODE)
_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
CJK_LANGUAGES = {"zh", "ja", "ko"}


def chain_of_thought(text: str) -> str:
    """The text inside ``<think>...</think>`` (an unclosed think runs to the end), else all of it."""
    m = _THINK.search(text)
    return m.group(1) if m else _TAGS.sub(" ", text)


def words(text: str) -> list[str]:
    """Words of ``text``: CJK characters one by one, Latin (or other alphabetic) runs whole."""
    return _WORD.findall(_TAGS.sub(" ", text))


@lru_cache(maxsize=8)
def _lingua_detector(languages: tuple[str, ...]):
    from lingua import IsoCode639_1, LanguageDetectorBuilder

    codes = [getattr(IsoCode639_1, code.upper()) for code in languages]
    return LanguageDetectorBuilder.from_iso_codes_639_1(*codes).build()


@lru_cache(maxsize=64)
def is_known_language(code: str) -> bool:
    """A language this module can label: by script (``zh``, ``ja``, ``ko``, ``en``) or by lingua."""
    if code in CJK_LANGUAGES or code == "en":
        return True
    if not isinstance(code, str) or not code.isalpha() or len(code) != 2:
        return False
    from lingua import IsoCode639_1

    return hasattr(IsoCode639_1, code.upper())


def _latin_word_languages(latin_words: list[str], languages: tuple[str, ...]) -> list[str]:
    """Language of each Latin-script word, from lingua's spans over the words joined in order.

    Single words are too short to identify; lingua's multi-language detection labels spans of the
    running text, and each word takes the label of the span it falls in (unlabelled: "unknown").
    Spans and words are both in text order, so one pass over each labels every word.
    """
    if len(languages) == 1:
        return [languages[0]] * len(latin_words)
    text, starts = "", []
    for w in latin_words:
        starts.append(len(text))
        text += w + " "
    labels = ["unknown"] * len(latin_words)
    spans = sorted(
        _lingua_detector(languages).detect_multiple_languages_of(text), key=lambda s: s.start_index
    )
    i = 0
    for span in spans:
        code = span.language.iso_code_639_1.name.lower()
        while i < len(starts) and starts[i] < span.start_index:
            i += 1
        while i < len(starts) and starts[i] < span.end_index:
            labels[i] = code
            i += 1
    return labels


def language_share(text: str, target: str, latin_languages: tuple[str, ...] = ("en",)) -> float:
    """Share of the chain-of-thought words of ``text`` in ``target``.

    CJK characters count as ``zh`` words by script alone; Latin-script words are English unless
    ``latin_languages`` names several, in which case lingua tells them apart. A chain without
    words (only numbers and symbols) mixes nothing and scores 1.0; an empty completion shows no
    language at all and scores 0.0, so saying nothing never earns the full reward.
    """
    if not text.strip():
        return 0.0
    ws = words(chain_of_thought(text))
    if not ws:
        return 1.0
    latin = [w for w in ws if not _CJK.match(w)]
    langs = tuple(dict.fromkeys(latin_languages if target in CJK_LANGUAGES else (*latin_languages, target)))
    hits = (len(ws) - len(latin)) if target == "zh" else 0
    hits += sum(label == target for label in _latin_word_languages(latin, langs))
    return hits / len(ws)
