"""Run identities: one record for every resumable run, compared field by field."""

from __future__ import annotations

import pytest

from headsup_lens.models import check_same_run, fingerprint, identity_differences, load_model, run_identity


def test_differences_are_named_and_a_different_run_is_refused(tmp_path):
    saved = {"recipe": {"lr": 0.1, "steps": 3}, "tasks": ["a"], "data": "x", "model": [1], "version": "1"}
    check_same_run(saved, dict(saved), tmp_path)
    other = {**saved, "recipe": {"lr": 0.05, "steps": 3}, "data": "y", "tasks": ["b"]}
    with pytest.raises(ValueError) as caught:
        check_same_run(saved, other, tmp_path, what="fine-tuning run", fresh="resume=False")
    message = str(caught.value)
    assert "holds a fine-tuning run that differs from this one in" in message
    assert "recipe.lr (0.1 there, 0.05 here)" in message and "training data (its content hash)" in message
    assert "tasks (['a'] there, ['b'] here)" in message and "(resume=False)" in message
    assert identity_differences({"config": {"alpha": 0.5}}, {"config": {"alpha": 0.25}}, nested={"config": ""}) == [
        "alpha (0.5 there, 0.25 here)"
    ]


def test_the_model_is_compared_by_content_in_either_recorded_form(llama_dir, tmp_path):
    model = load_model(str(llama_dir))
    identity = run_identity(model, recipe={"lr": 0.1})
    fp = fingerprint(model)
    assert identity["model"] == fp.to_dict() and identity["recipe"] == {"lr": 0.1}
    older = {**identity, "model": [*fp.structural(), fp.content_hash]}  # what run folders recorded before
    assert identity_differences(older, identity) == []
    changed = {**identity, "model": [*fp.structural(), "sha256:0"]}
    assert identity_differences(changed, identity)[0].startswith("model (")
    assert identity_differences({**identity, "model": "?"}, identity) == ["model (unreadable there)"]
