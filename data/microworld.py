"""The micro-world: verifiable +/- chain problems and an imperfect reasoning corpus.

The world is built so that R1-Zero's effect is real on a CPU: the pretraining corpus carries a
*systematic* error (an addition with a carry is written as ``true - 10`` most of the time, the
"forgot the carry" bug), so the base model's habit is wrong while the correct skill is in its
distribution. RL on the accuracy reward can then move a latent minority skill into the mode.

Three more imperfections mirror what R1-Zero meets in a real base model:

* self-checks (``wait, check: 47+8=55``) that follow risky steps (an addition with a carry, or a
  step that went wrong) and always recompute them correctly, so reflection pays off: a checked
  step is right, an unchecked carry is right 40 % of the time, and RL has a reason to check more;
* language switches inside a chain (English <-> Chinese connectors) that are independent of the
  arithmetic, so mixing costs no accuracy and accuracy-only RL has no reason to remove it;
* missing ``<think>``/``<answer>`` tags, so the format reward has something to teach.

Everything is drawn from a seeded ``random.Random``: the same config gives the same data.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, model_validator

from r1.config import new_option

LANGUAGES = ("en", "zh")

# Surface forms per language. English words carry their leading space so that the word tokenizer
# keeps one token per word (" then"), which makes both languages about equally long in tokens.
_PROMPT = {"en": "Compute {expr}.", "zh": "计算 {expr}。"}
_THEN = {"en": ", then ", "zh": "，然后 "}
_CHECK = {"en": ". wait, check: {fix}", "zh": "。等等，检查：{fix}"}
_CLOSE = {"en": ". so the answer is {answer}.", "zh": "。所以答案是 {answer}。"}
CHECK_MARKERS = ("wait", "等等")

_EN_ONES = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
]
_EN_TENS = ["_", "_", *["twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]]
_ZH_DIGITS = "零一二三四五六七八九"

# Every word the world can write; the base tokenizer is built from this lexicon plus characters
# (the order fixes the token ids: append, never reorder).
ENGLISH_WORDS = [
    *["Compute", "then", "wait", "check", "so", "the", "answer", "is", "User", "Assistant", "System"],
    *_EN_ONES,
    *_EN_TENS[2:],
    *[
        "hundred",
        "and",
        "minus",
        "plus",
        "equals",
        "Which",
        "larger",
        "smaller",
        "number",
        "Write",
        "in",
        "words",
        "Translate",
        "to",
    ],
    *[
        "English",
        "Chinese",
        "Say",
        "a",
        "Is",
        "than",
        "yes",
        "no",
        "maybe",
        "it",
        "sure",
        "not",
        "hard",
        "say",
        "I",
        "think",
        "probably",
        "about",
    ],
    *["let", "me", "see", "well", "anyway", "hmm", "depends", "or"],
]
CHINESE_CHARS = (
    "计算然后等检查所以答案是零一二三四五六七八九十百负加减等于哪个大小数字写成中文英文翻译为说较比不确定好难"
    "可能吧我觉得嗯看情况把和"
)
SYMBOLS = "0123456789+-=.,:?!()，。：？！ \n"
# What tool calls and results add (only when the world has its tool: the default vocabulary stays).
TOOL_WORDS = ["Tools", "Tool", "calculator", "name", "arguments", "expression", "error"]
TOOL_SYMBOLS = "{}\"'_"


class CorpusConfig(BaseModel):
    """Imperfections of the pretraining corpus (probabilities per step or per trace)."""

    model_config = ConfigDict(extra="forbid")

    size: int = Field(50_000, gt=0, description="number of traces in the pretraining corpus")
    carry_bug: float = Field(0.6, ge=0, le=1, description="P(addition with a carry is written as true-10)")
    step_noise: float = Field(0.1, ge=0, le=1, description="P(any other step is off by 1 or 2)")
    self_check: float = Field(
        0.3, ge=0, le=1, description="P(a correct self-check follows a carry or a wrong step)"
    )
    untagged: float = Field(0.2, ge=0, le=1, description="P(a trace has no think/answer tags)")
    language_switch: float = Field(0.3, ge=0, le=1, description="P(a trace switches language once)")


class ToolsConfig(BaseModel):
    """A calculator in the world: a share of corpus traces call it (agent RL's starting habit).

    Tool traces are the corpus's own traces (same problems, same slips) with calls inserted:
    at a step the trace may stop at ``a+b=``, call the calculator on ``a+b``, and go on from its
    result (``use``) or ignore it and write its own value, slip included. The base thus knows
    the syntax and that results help sometimes; RL has a habit to strengthen.
    """

    model_config = ConfigDict(extra="forbid")

    enabled: bool = False
    corpus_share: float = Field(0.3, ge=0, le=1, description="corpus traces written with the tool offered")
    call_carry: float = Field(
        0.6, ge=0, le=1, description="P(a tool trace calls at an addition with a carry)"
    )
    call_other: float = Field(0.1, ge=0, le=1, description="P(it calls at any other step)")
    use: float = Field(0.5, ge=0, le=1, description="P(the step after a call goes on from the result)")


class WorldConfig(BaseModel):
    """The micro-world's problem distribution and split sizes."""

    model_config = ConfigDict(extra="forbid")

    seed: int = 0
    n_train: int = Field(4000, gt=0, description="RL prompts")
    n_test: int = Field(400, gt=0, description="held-out problems, excluded from corpus and prompts")
    n_general: int = Field(
        3000, ge=0, description="non-reasoning prompts (number words, comparisons, translation)"
    )
    operands: list[int] = Field(
        default_factory=lambda: [2, 3, 4], description="chain lengths, drawn uniformly"
    )
    max_value: int = Field(99, gt=1, description="largest first operand")
    max_operand: int = Field(99, gt=1, description="largest later operand (smaller = easier steps)")
    languages: list[str] = Field(default_factory=lambda: list(LANGUAGES))
    corpus: CorpusConfig = Field(default_factory=CorpusConfig)
    tools: ToolsConfig = Field(default_factory=ToolsConfig, **new_option())

    @model_validator(mode="after")
    def _check(self) -> WorldConfig:
        unknown = set(self.languages) - set(LANGUAGES)
        if unknown:
            raise ValueError(f"unknown languages {sorted(unknown)}; the micro-world knows {list(LANGUAGES)}")
        if not self.operands or min(self.operands) < 2:
            raise ValueError("operands must list chain lengths >= 2")
        return self


@dataclass(frozen=True)
class Problem:
    """One chain problem such as ``23+48-15`` posed in one language."""

    operands: tuple[int, ...]
    ops: tuple[str, ...]
    language: str

    @property
    def expression(self) -> str:
        out = str(self.operands[0])
        for op, b in zip(self.ops, self.operands[1:], strict=True):
            out += f"{op}{b}"
        return out

    @property
    def answer(self) -> int:
        acc = self.operands[0]
        for op, b in zip(self.ops, self.operands[1:], strict=True):
            acc = acc + b if op == "+" else acc - b
        return acc

    @property
    def prompt(self) -> str:
        return _PROMPT[self.language].format(expr=self.expression)


def sample_problem(rng: random.Random, cfg: WorldConfig) -> Problem:
    """Draw a problem whose running value stays within 0..2*max_value (no negative intermediates)."""
    n = rng.choice(cfg.operands)
    acc = rng.randint(0, cfg.max_value)
    operands, ops = [acc], []
    for _ in range(n - 1):
        b = rng.randint(0, cfg.max_operand)
        op = "-" if (acc >= b and rng.random() < 0.5) else "+"
        acc = acc + b if op == "+" else acc - b
        operands.append(b)
        ops.append(op)
    return Problem(tuple(operands), tuple(ops), rng.choice(cfg.languages))


def _other(language: str) -> str:
    return "zh" if language == "en" else "en"


def has_carry(a: int, b: int) -> bool:
    """True when adding the units digits of a and b carries into the tens."""
    return (abs(a) % 10) + (abs(b) % 10) >= 10


@dataclass(frozen=True)
class ToolCall:
    """A calculator call inside a trace, and what the calculator answers."""

    expression: str
    result: str


def trace_parts(
    problem: Problem,
    rng: random.Random,
    corpus: CorpusConfig | None = None,
    tools: ToolsConfig | None = None,
    tool_rng: random.Random | None = None,
) -> list[str | ToolCall]:
    """A completion for ``problem`` as text pieces and tool calls (see :func:`render_trace`).

    With ``tools`` the trace may call the calculator at a step; those draws come from
    ``tool_rng`` only, so a tool trace has exactly the problem and the slips of the plain one.
    """
    clean = corpus is None
    lang = problem.language
    n_steps = len(problem.ops)
    # A switch happens at a step boundary or before the closing sentence (index n_steps).
    switch_at = None if clean or rng.random() >= corpus.language_switch else rng.randint(1, n_steps)

    def lang_at(i: int) -> str:
        return _other(lang) if switch_at is not None and i >= switch_at else lang

    parts: list[str | ToolCall] = []
    acc = problem.operands[0]
    for i, (op, b) in enumerate(zip(problem.ops, problem.operands[1:], strict=True)):
        true = acc + b if op == "+" else acc - b
        written = true
        carry = op == "+" and has_carry(acc, b)
        if not clean:
            if carry:
                if rng.random() < corpus.carry_bug:
                    written = true - 10
            elif rng.random() < corpus.step_noise:
                written = true + rng.choice((-2, -1, 1, 2))
        if i > 0:
            parts.append(_THEN[lang_at(i)])
        risky = written != true or carry  # before any call: the plain trace's draws stay the same
        if tools is not None and tool_rng.random() < (tools.call_carry if carry else tools.call_other):
            parts += [f"{acc}{op}{b}=", ToolCall(f"{acc}{op}{b}", str(true))]
            written = true if tool_rng.random() < tools.use else written
            parts.append(str(written))
        else:
            parts.append(f"{acc}{op}{b}={written}")
        if not clean and risky and rng.random() < corpus.self_check:
            parts.append(_CHECK[lang_at(i)].format(fix=f"{acc}{op}{b}={true}"))
            written = true
        acc = written
    parts.append(_CLOSE[lang_at(n_steps)].format(answer=acc))
    if not clean and rng.random() < corpus.untagged:
        return parts
    return ["<think>", *parts, f"</think><answer>{acc}</answer>"]


def render_trace(problem: Problem, rng: random.Random, corpus: CorpusConfig | None = None) -> str:
    """Write a completion for ``problem``: clean when ``corpus`` is None, else with its imperfections.

    The errors propagate: a wrong step that no check fixes carries into the next step, so the
    final answer of an imperfect trace is wrong exactly when an unfixed error happened.
    """
    return "".join(p for p in trace_parts(problem, rng, corpus) if isinstance(p, str))


def tool_conversation(prompt: str, parts: list[str | ToolCall]) -> list[dict]:
    """A trace with calls as chat messages: each call ends an assistant turn, its result is a tool turn."""
    messages: list[dict] = [{"role": "user", "content": prompt}]
    text = ""
    for part in parts:
        if isinstance(part, ToolCall):
            call = {
                "type": "function",
                "function": {"name": "calculator", "arguments": {"expression": part.expression}},
            }
            messages += [
                {"role": "assistant", "content": text, "tool_calls": [call]},
                {"role": "tool", "name": "calculator", "content": part.result},
            ]
            text = ""
        else:
            text += part
    return [*messages, {"role": "assistant", "content": text}]


def generate_problems(rng: random.Random, cfg: WorldConfig, n: int, exclude: set[str]) -> list[Problem]:
    """Draw ``n`` problems whose expressions are not in ``exclude`` (the held-out split)."""
    out: list[Problem] = []
    while len(out) < n:
        p = sample_problem(rng, cfg)
        if p.expression not in exclude:
            out.append(p)
    return out


def generate_test_problems(cfg: WorldConfig) -> list[Problem]:
    """The held-out split: distinct expressions, drawn from their own seeded stream."""
    rng = random.Random(f"{cfg.seed}-test")
    seen: set[str] = set()
    out: list[Problem] = []
    while len(out) < cfg.n_test:
        p = sample_problem(rng, cfg)
        if p.expression not in seen:
            seen.add(p.expression)
            out.append(p)
    return out


def problem_row(p: Problem) -> dict:
    """A prompt row in TRL's conversational format plus the columns rewards read."""
    return {
        "prompt": [{"role": "user", "content": p.prompt}],
        "answer": str(p.answer),
        "language": p.language,
        "expression": p.expression,
        "n_operands": len(p.operands),
    }


# -- non-reasoning tasks (answered without a chain of thought) and preference pairs -------------


def number_words(n: int, language: str) -> str:
    """0..999 written out: ``forty seven`` / ``四十七``."""
    if not 0 <= n <= 999:
        raise ValueError(f"number_words covers 0..999, got {n}")
    if language == "zh":
        if n < 10:
            return _ZH_DIGITS[n]
        h, t, u = n // 100, n // 10 % 10, n % 10
        out = f"{_ZH_DIGITS[h]}百" if h else ""
        if t:
            out += ("" if (t == 1 and not h) else _ZH_DIGITS[t]) + "十"
        elif h and u:
            out += "零"
        return out + (_ZH_DIGITS[u] if u else "")
    h, rest = divmod(n, 100)
    words = [_EN_ONES[h], "hundred"] if h else []
    if rest or not h:
        if rest < 20:
            words.append(_EN_ONES[rest])
        else:
            words.append(_EN_TENS[rest // 10] + (f" {_EN_ONES[rest % 10]}" if rest % 10 else ""))
    return " ".join(words)


_GENERAL = {
    "words": {"en": "Write {a} in words.", "zh": "把 {a} 写成中文。"},
    "compare": {"en": "Which is larger, {a} or {b}?", "zh": "{a} 和 {b} 哪个大？"},
    "translate": {"en": "Translate to English: {w}", "zh": "翻译为中文: {w}"},
}
_EVASIVE = {"en": "it is hard to say, it depends", "zh": "不确定，看情况吧"}
_RAMBLE = {
    "en": "well, let me see, I think it is probably {x}, anyway",
    "zh": "嗯，我觉得可能是 {x} 吧，不确定",
}


@dataclass(frozen=True)
class GeneralTask:
    """A non-reasoning prompt with its short correct answer and a tempting wrong one."""

    prompt: str
    answer: str
    wrong: str
    language: str
    kind: str


def sample_general(rng: random.Random, cfg: WorldConfig) -> GeneralTask:
    """Number words, comparisons and translation of number words, in either language."""
    lang = rng.choice(cfg.languages)
    kind = rng.choice(sorted(_GENERAL))
    a, b = rng.sample(range(0, 200), 2)
    if kind == "words":
        return GeneralTask(
            _GENERAL[kind][lang].format(a=a), number_words(a, lang), number_words(b, lang), lang, kind
        )
    if kind == "compare":
        return GeneralTask(_GENERAL[kind][lang].format(a=a, b=b), str(max(a, b)), str(min(a, b)), lang, kind)
    src = _other(lang)  # translate from the other language into the prompt's language
    return GeneralTask(
        _GENERAL[kind][lang].format(w=number_words(a, src)),
        number_words(a, lang),
        number_words(b, lang),
        lang,
        kind,
    )


def general_completion(answer: str) -> str:
    """Non-reasoning answers keep the format with an empty think (thinking-mode fusion)."""
    return f"<think></think><answer>{answer}</answer>"


def preference_pair(task: GeneralTask, rng: random.Random) -> tuple[str, str, str]:
    """(chosen, rejected, flaw): a correct concise summary against a wrong, evasive or rambling one."""
    flaw = rng.choice(("wrong", "evasive", "rambling"))
    rejected = {
        "wrong": task.wrong,
        "evasive": _EVASIVE[task.language],
        "rambling": _RAMBLE[task.language].format(x=task.answer),
    }[flaw]
    return general_completion(task.answer), general_completion(rejected), flaw


def general_row(t: GeneralTask) -> dict:
    """A general (non-reasoning) prompt row: the answer, and a wrong one for preference pairs."""
    return {
        "prompt": [{"role": "user", "content": t.prompt}],
        "answer": t.answer,
        "wrong": t.wrong,
        "language": t.language,
        "kind": "general",
        "task": t.kind,
    }


def generate_general(cfg: WorldConfig) -> list[GeneralTask]:
    rng = random.Random(f"{cfg.seed}-general")
    return [sample_general(rng, cfg) for _ in range(cfg.n_general)]


def problem_from_expression(expression: str, language: str) -> Problem:
    """Parse ``47+8-3`` back into a Problem (to render clean traces for train prompts)."""
    import re

    tokens = re.findall(r"\d+|[+-]", expression)
    operands = tuple(int(t) for t in tokens[::2])
    ops = tuple(tokens[1::2])
    return Problem(operands, ops, language)
