"""data/prompts.jsonl: enough prompts per profile, several sources, strongly varied lengths."""
import pytest

from helpers.prompts import load_prompts


@pytest.mark.parametrize("profile", ["cpu", "gpu"])
def test_each_profile_has_a_heterogeneous_prompt_set(profile):
    prompts = load_prompts(profile)
    assert len(prompts) >= 20
    assert len({p["source"] for p in prompts}) >= 4
    lengths = sorted(len(p["prompt"]) for p in prompts)
    assert lengths[-1] >= 20 * lengths[0], "lengths should vary strongly"


def test_ids_unique_and_sources_filter():
    prompts = load_prompts()
    assert len({p["id"] for p in prompts}) == len(prompts)
    code = load_prompts("gpu", source="code")
    assert code and all(p["source"] == "code" and p["profile"] == "gpu" for p in code)
    assert {"chat", "code", "math", "summarisation", "translation", "qa"} <= {p["source"] for p in load_prompts("gpu")}


def test_unknown_profile_is_a_clear_error():
    with pytest.raises(ValueError, match="profiles in"):
        load_prompts("tpu")
