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


def word_language(word: str, latin_languages: tuple[str, ...] = ("en",)) -> str:
    """The language of one word: ``zh`` for CJK script, else a Latin-script language."""
    if _CJK.match(word):
        return "zh"
    if len(latin_languages) == 1:
        return latin_languages[0]
    found = _lingua_detector(latin_languages).detect_language_of(word)
    return found.iso_code_639_1.name.lower() if found else latin_languages[0]


def language_share(text: str, target: str, latin_languages: tuple[str, ...] = ("en",)) -> float:
    """Share of the chain-of-thought words of ``text`` in ``target``; 1.0 when it has no words."""
    ws = words(chain_of_thought(text))
    if not ws:
        return 1.0
    langs = (
        latin_languages
        if target in CJK_LANGUAGES or target in latin_languages
        else (*latin_languages, target)
    )
    hits = sum(word_language(w, langs) == target for w in ws)
    return hits / len(ws)
