"""models.family: one record per model family, looked up by name, that callers ask instead of comparing names."""

import dataclasses

import pytest

import models
from experiments.configs import gpt2 as gpt2_configs
from experiments.configs import llama as llama_configs
from experiments.configs import lstm as lstm_configs
from experiments.configs import pixelcnn as pixelcnn_configs
from experiments.configs import pythia as pythia_configs
from lira.errors import InputError


@pytest.mark.parametrize("name, data_kind, stat_names, fine_tunes", [
    ("lstm", "tokens", ("mu", "sigma", "top1"), False),
    ("gpt_neox", "tokens", ("mu", "sigma", "top1"), True),
    ("gpt2", "tokens", ("mu", "sigma", "top1"), True),
    ("llama", "tokens", ("mu", "sigma", "top1"), True),
    ("pixelcnn_pp", "images", (), False),
])
def test_each_family_answers_for_itself(name, data_kind, stat_names, fine_tunes):
  family = models.family(name)
  assert (family.name, family.data_kind, family.stat_names, family.fine_tunes) == (
      name, data_kind, stat_names, fine_tunes)
  assert family is models.FAMILIES[name]
  with pytest.raises(dataclasses.FrozenInstanceError):
    family.stat_names = ()


def test_every_named_config_names_a_family_and_its_model_stores_the_familys_statistics():
  tiny = {"lstm": dict(vocab_size=12, embed_dim=4, hidden_dim=4, num_layers=1),
          "gpt_neox": dict(vocab_size=12, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                           intermediate_size=16),
          "gpt2": dict(vocab_size=12, n_embd=16, n_layer=1, n_head=2, n_positions=8),
          "llama": dict(vocab_size=12, hidden_size=16, intermediate_size=16, num_hidden_layers=1, num_attention_heads=2,
                        num_key_value_heads=1)}
  for cfg in (lstm_configs.get_config("tiny"), pythia_configs.get_config("tiny"), gpt2_configs.get_config("tiny"),
              llama_configs.get_config("tiny"), pixelcnn_configs.get_config("tiny")):
    family = models.family(cfg.model.name)
    fields = dict(cfg.model)
    fields.pop("name")
    model = family.build(**tiny[family.name]) if family.data_kind == "tokens" else family.build(**fields)
    assert model.name == family.name and model.stat_names == family.stat_names
    assert models.get_model(family.name, **tiny.get(family.name, fields)).graphdef == model.graphdef


@pytest.mark.parametrize("name", ["mistral", "", None, "LSTM"])
def test_an_unknown_family_is_one_input_error_naming_the_available_ones(name):
  with pytest.raises(InputError, match=rf"unknown model {name!r}; available: lstm, gpt_neox, gpt2, llama, "
                                       "pixelcnn_pp") as e:
    models.family(name)
  assert len(str(e.value).splitlines()) == 1
  with pytest.raises(InputError, match="unknown model"):
    models.get_model(name, vocab_size=5)


def test_a_data_kind_outside_tokens_and_images_is_refused():
  with pytest.raises(ValueError, match="data_kind must be one of"):
    models.Family("x", data_kind="audio", stat_names=(), fine_tunes=False, build=lambda **kw: None)
