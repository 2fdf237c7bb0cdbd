"""The plugin's neuron_config options: unknown names and values outside an option's choices are
errors that list what is allowed (vllm_neuron/options.py reads only the config's
additional_config, so no engine is needed here)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from vllm_neuron.options import neuron_option


def config(**options: object) -> SimpleNamespace:
    return SimpleNamespace(additional_config={"neuron_config": options})


def test_a_given_option_its_default_and_a_config_without_options():
    assert neuron_option(config(attention="sdpa"), "attention", "paged_kernel") == "sdpa"
    assert neuron_option(config(), "attention", "paged_kernel") == "paged_kernel"
    assert neuron_option(SimpleNamespace(additional_config=None), "num_batched_tokens_buckets") is None


def test_a_value_outside_the_choices_is_refused_with_them():
    with pytest.raises(ValueError, match=r"attention='flash'; use one of \['paged_kernel', 'sdpa', 'nki'\]"):
        neuron_option(config(attention="flash"), "attention", "paged_kernel")


def test_an_unknown_option_is_refused_with_the_list():
    with pytest.raises(ValueError, match=r"unknown neuron_config option\(s\) \['atention'\].*attention:"):
        neuron_option(config(atention="sdpa"), "num_batched_tokens_buckets")
