"""The data files and their readers (helpers.data)."""

from __future__ import annotations

import re

import pytest

from helpers import data
from helpers.data import RESULTS


def test_read_prompts_unescapes_newlines_and_refuses_a_bad_limit(tmp_path):
    path = tmp_path / "p.txt"
    path.write_text("first\\nline\n\nsecond\n")
    assert data.read_prompts(path) == ["first\nline", "second"]
    assert data.read_prompts(path, 1) == ["first\nline"]
    for limit in (0, 3):
        with pytest.raises(ValueError, match=r"use 1\.\.2"):
            data.read_prompts(path, limit)


def test_training_prompts_do_not_overlap_the_held_out_prompts():
    train = set(data.read_prompts(data.DISTILL_PROMPTS))
    held_out = set(data.read_prompts(data.PROMPTS)) | set(data.read_prompts(data.ARTICLE_PROMPTS))
    assert len(train) > 5000 and len(data.read_prompts(data.PROMPTS)) == 60
    assert not train & held_out


TRAINING_TEMPLATES = (
    "{} is", "News report: {} made headlines today when", "Q: What is interesting about {}?\\nA:",
    "The biggest misconception about {} is that", "The history of {} begins", "Scientists who study {} have found that",
    "The most surprising fact about {} is", "Let me tell you about {}.", "A beginner's guide to {}.",
    "The pros and cons of {}:", "Here is a short explanation of {}:", "My teacher once explained {} like this:",
    "Once upon a time, there was a story about {}.", "A children's book about {}:",
    "Dear diary, today I learned about {}.", "In the future, {} will", "I have always been fascinated by {} because",
    "If you want to understand {}, start with", "An essay on {}.\\n\\nIntroduction:",
    "Three things everyone should know about {}:", "Write a short poem about {}.\\n", "Why does {} matter?",
)
"""The 22 templates of data/distill_prompts.txt (a literal \\n as in the file)."""


def training_grid() -> tuple[list[str], list[str]]:
    """The training file as written: its topics (from the news-report template, which every topic fills) and its
    lines."""
    lines = [line for line in data.DISTILL_PROMPTS.read_text().splitlines() if line.strip()]
    news = re.compile(r"News report: (.+) made headlines today when")
    return [m.group(1) for m in map(news.fullmatch, lines) if m], lines


def forbidden_words(topics: list[str]) -> set[str]:
    """What an evaluation prompt must not contain as words: every training topic without its article, singular and
    plural ("An old lighthouse keeper" forbids "old lighthouse keeper(s)", "Bicycles" forbids "bicycle(s)")."""
    keys = {re.sub(r"^(a|an|the) ", "", topic.lower()) for topic in topics}
    return keys | {key.removesuffix("s") for key in keys} | {key + "s" for key in keys}


def template_texts() -> tuple[set[str], set[str]]:
    """The templates' fixed texts, lower case, the topic's place cut out: phrases of two words or more (which must
    not occur anywhere in an evaluation prompt) and single words (which must not end one: "... begins")."""
    pieces = {piece.strip(" .:?,").lower() for t in TRAINING_TEMPLATES
              for piece in t.replace("\\n", " ").split("{}") if piece.strip(" .:?,")}
    return {p for p in pieces if " " in p}, {p for p in pieces if " " not in p}


def test_the_training_prompts_are_topics_times_templates():
    topics, lines = training_grid()
    patterns = [re.compile(re.escape(t).replace(r"\{\}", "(.+)"), re.IGNORECASE) for t in TRAINING_TEMPLATES]
    lowered = {t.lower() for t in topics}
    for line in lines:
        assert any((m := p.fullmatch(line)) and m.group(1).lower() in lowered for p in patterns), line
    assert len(topics) == 234 and len(lines) == 234 * 22 - 1


@pytest.mark.parametrize("path", [data.EVAL_PROMPTS, data.GROUNDED_PROMPTS], ids=lambda p: p.name)
def test_the_evaluation_prompts_share_no_topic_or_template_with_training(path):
    """Held out by construction (data/eval_prompts.txt, data/grounded_prompts.txt): no training topic as words, no
    training template's fixed text, and no training prompt or other held-out prompt repeated; at least 40, so that
    the protocol's evaluation split (every other line) holds the 20 an interval needs."""
    prompts = data.read_prompts(path)
    assert len(prompts) >= 40 and len(set(prompts)) == len(prompts)
    topics, lines = training_grid()
    forbidden = forbidden_words(topics)
    phrases, endings = template_texts()
    for prompt in prompts:
        text = prompt.lower()
        shared = {w for w in forbidden if re.search(rf"\b{re.escape(w)}\b", text)}
        assert not shared, f"{prompt!r} shares a training topic: {sorted(shared)}"
        assert not [p for p in phrases if p in text], f"{prompt!r} shares a training template"
        assert text.rstrip(" .:?").split()[-1] not in endings, f"{prompt!r} ends like a training template"
    others = [p for p in (data.PROMPTS, data.EVAL_PROMPTS, data.GROUNDED_PROMPTS) if p != path]
    assert not set(prompts) & (set(lines) | {q for other in others for q in data.read_prompts(other)})


def test_grounded_tasks_contain_the_passage():
    passage = data.PASSAGE.read_text().strip()
    tasks = data.grounded_tasks()
    assert set(tasks) == {"summarise", "quote", "edit"}
    assert all(passage in text and "{passage}" not in text for text in tasks.values())


def test_results_are_found_by_name_wherever_the_process_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # as in Colab: the working directory is not the repository
    assert data.result_path("bench-pocket-xeon.json") == data.RESULTS / "bench-pocket-xeon.json"
    assert "command" in data.read_json("bench-pocket-xeon.json")
    own = tmp_path / "mine.json"
    own.write_text('{"command": "mine"}')
    assert data.read_json(own) == {"command": "mine"}


def test_results_refuse_relative_paths_and_name_what_exists():
    with pytest.raises(ValueError, match="absolute path"):
        data.result_path("../data/results/bench-pocket-xeon.json")
    with pytest.raises(FileNotFoundError, match=r"bench-pocket-xeon\.json"):
        data.result_path("no-such-result.json")


def test_write_json_is_strict_json_with_null_for_nan(tmp_path):
    path = data.write_json({"a": float("nan"), "b": (1, float("inf")), 2: {"c": 0.5}}, tmp_path / "sub" / "r.json")
    assert path.read_text() == '{\n  "a": null,\n  "b": [\n    1,\n    null\n  ],\n  "2": {\n    "c": 0.5\n  }\n}\n'
    assert data.read_json(path) == {"a": None, "b": [1, None], "2": {"c": 0.5}}


def test_every_committed_result_file_is_described_in_the_data_readme():
    described = (RESULTS.parent / "README.md").read_text()
    missing = [path.name for path in sorted(RESULTS.glob("*.json")) if f"`results/{path.name}`" not in described]
    assert not missing, f"data/README.md: describe {missing}"
