import pytest

from breaknli_fast.data.labels import (LabelMappingError, canonical_label, dataset_label, is_missing_label,
                                       map_id2label, parse_label_map)
from breaknli_fast.data.normalize import normalize_text


@pytest.mark.parametrize("name,expected", [("ENTAILMENT", "entailment"), ("entail", "entailment"), ("Neutral", "neutral"),
                                           ("CONTRADICTION", "contradiction"), ("contradict", "contradiction"),
                                           ("LABEL_0", None), ("", None)])
def test_canonical_label(name, expected):
    assert canonical_label(name) == expected


def test_dataset_label_uses_hub_order_and_missing_values():
    assert [dataset_label(i) for i in (0, 1, 2)] == ["entailment", "neutral", "contradiction"]
    assert dataset_label("2") == "contradiction"
    assert dataset_label(-1) is None and is_missing_label(-1) and is_missing_label("-") and is_missing_label("")
    assert dataset_label(7) is None and not is_missing_label(7)
    assert dataset_label(True) is None


def test_map_id2label_by_name_never_by_index():
    # MNLI checkpoints: contradiction=0, neutral=1, entailment=2
    assert map_id2label({0: "CONTRADICTION", 1: "NEUTRAL", 2: "ENTAILMENT"}) == ["contradiction", "neutral", "entailment"]
    assert map_id2label({"0": "entailment", "1": "neutral", "2": "contradiction"}) == ["entailment", "neutral", "contradiction"]


def test_unmappable_labels_are_refused_with_a_hint():
    with pytest.raises(LabelMappingError, match="--label-map"):
        map_id2label({0: "LABEL_0", 1: "LABEL_1", 2: "LABEL_2"})
    with pytest.raises(LabelMappingError, match="one-to-one"):
        map_id2label({0: "entailment", 1: "entailment", 2: "neutral"})


def test_explicit_label_map():
    lm = parse_label_map("LABEL_0=contradiction,LABEL_1=neutral,LABEL_2=ENTAILMENT")
    assert map_id2label({0: "LABEL_0", 1: "LABEL_1", 2: "LABEL_2"}, lm) == ["contradiction", "neutral", "entailment"]
    with pytest.raises(LabelMappingError):
        parse_label_map("LABEL_0=yes")
    with pytest.raises(LabelMappingError):
        parse_label_map("LABEL_0")


@pytest.mark.parametrize("text,expected", [("  A man sleeps  ", "A man sleeps."), ("Is it?", "Is it?"), ("Wow!", "Wow!"),
                                           ("Done.", "Done."), ("", ""), ("   ", "")])
def test_normalize_text(text, expected):
    assert normalize_text(text) == expected
