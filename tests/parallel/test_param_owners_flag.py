"""ParamOwners reads InternEvo's overlap_sync_param in every flag spelling (review nit 14)."""

from __future__ import annotations

import pytest

from perfmodel._schema import FLAG_WORDS
from perfmodel.errors import ConfigError
from perfmodel.parallel.stack_choices import ParamOwners


@pytest.mark.parametrize("word", sorted(FLAG_WORDS))
def test_every_flag_word_selects_its_owner_rule(word: str) -> None:
    want = ParamOwners.MODULE_WALK if FLAG_WORDS[word] else ParamOwners.SIZE_GREEDY
    assert ParamOwners.parse(word) is want
    assert ParamOwners.parse(word.upper()) is want


def test_other_words_are_errors() -> None:
    with pytest.raises(ConfigError, match="maybe"):
        ParamOwners.parse("maybe")
