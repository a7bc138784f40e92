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


def _latin_word_languages(latin_words: list[str], languages: tuple[str, ...]) -> list[str]:
    """Language of each Latin-script word, from lingua's spans over the words joined in order.

    Single words are too short to identify; lingua's multi-language detection labels spans of the
    running text, and each word takes the label of the span it falls in (unlabelled: "unknown").
    """
    if len(languages) == 1:
        return [languages[0]] * len(latin_words)
    text, starts = "", []
    for w in latin_words:
        starts.append(len(text))
        text += w + " "
    labels = ["unknown"] * len(latin_words)
    for span in _lingua_detector(languages).detect_multiple_languages_of(text):
        code = span.language.iso_code_639_1.name.lower()
        for i, start in enumerate(starts):
            if span.start_index <= start < span.end_index:
                labels[i] = code
    return labels


def language_share(text: str, target: str, latin_languages: tuple[str, ...] = ("en",)) -> float:
    """Share of the chain-of-thought words of ``text`` in ``target``; 1.0 when it has no words.

    CJK characters count as ``zh`` words by script alone; Latin-script words are English unless
    ``latin_languages`` names several, in which case lingua tells them apart.
    """
    ws = words(chain_of_thought(text))
    if not ws:
        return 1.0
    latin = [w for w in ws if not _CJK.match(w)]
    langs = tuple(dict.fromkeys(latin_languages if target in CJK_LANGUAGES else (*latin_languages, target)))
    hits = (len(ws) - len(latin)) if target == "zh" else 0
    hits += sum(label == target for label in _latin_word_languages(latin, langs))
    return hits / len(ws)
