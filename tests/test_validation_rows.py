"""``perfmodel.catalogue.validation_rows``: the one reader of a validation file beside
``--published`` (``accuracy.load_modern``/``load_scale``, ``accuracy_2026.load_rows``)."""

import json

from perfmodel.accuracy import load_modern, load_scale
from perfmodel.accuracy_2026 import load_rows
from perfmodel.catalogue import validation_rows


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_a_folder_a_sibling_file_and_no_file(tmp_path):
    _write(tmp_path / "modern.jsonl", [{"id": "a"}, {"id": "b"}])
    _write(tmp_path / "published.jsonl", [{"id": "p"}])
    assert validation_rows(tmp_path, "modern.jsonl") == [{"id": "a"}, {"id": "b"}]
    # a file path stands for its folder: published.jsonl's sibling is read
    assert validation_rows(tmp_path / "published.jsonl", "modern.jsonl") == [
        {"id": "a"},
        {"id": "b"},
    ]
    assert validation_rows(tmp_path / "modern.jsonl", "modern.jsonl") == [{"id": "a"}, {"id": "b"}]
    assert validation_rows(tmp_path, "scale.jsonl") == []
    assert validation_rows(tmp_path / "missing" / "published.jsonl", "modern.jsonl") == []


def test_the_loaders_read_through_it(tmp_path):
    _write(tmp_path / "modern.jsonl", [{"id": "m"}])
    _write(tmp_path / "scale.jsonl", [{"id": "s"}])
    _write(tmp_path / "systems2026.jsonl", [{"id": "y"}])
    published = tmp_path / "published.jsonl"
    assert load_modern(published) == [{"id": "m"}]
    assert load_scale(published) == [{"id": "s"}]
    assert load_rows(published) == [{"id": "y"}]
    assert load_rows(tmp_path / "elsewhere" / "published.jsonl") == []


def test_the_shipped_copy_is_the_default():
    assert validation_rows(None, "modern.jsonl") == load_modern()
    assert len(load_modern()) > 0
