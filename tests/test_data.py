"""The data files and their readers (helpers.data)."""

from __future__ import annotations

import pytest

from helpers import data


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
