"""TRL's SFTTrainer (full and LoRA) and PEFT adapters on `neuron` against the same runs on the CPU."""
from __future__ import annotations

import pytest
import torch

from local_hf import tokenizer
from torch_neuronx.testing.tiny_hf import VOCAB, tiny_llama

trl = pytest.importorskip("trl")
peft = pytest.importorskip("peft")
datasets = pytest.importorskip("datasets")


def sft(out, use_cpu: bool, lora: bool, **options):
    texts = [f"the quick brown fox {i} jumps over the lazy dog" for i in range(16)]
    config = trl.SFTConfig(str(out), max_steps=3, per_device_train_batch_size=4, learning_rate=1e-3, logging_steps=1,
                           report_to=[], use_cpu=use_cpu, seed=0, max_length=64, disable_tqdm=True, **options)
    adapter = peft.LoraConfig(r=4, target_modules=["q_proj", "v_proj"]) if lora else None
    trainer = trl.SFTTrainer(model=tiny_llama(), args=config, train_dataset=datasets.Dataset.from_dict({"text": texts}),
                             processing_class=tokenizer(), peft_config=adapter)
    trainer.train()
    return trainer


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_sft_trainer_matches_the_cpu(tmp_path, lora):
    device = sft(tmp_path / "neuron", use_cpu=False, lora=lora)
    assert device.args.device.type == "neuron"
    # TRL's Neuron path: pad_to_multiple_of="auto" pads every batch to a multiple of 128 tokens on a
    # device of type "neuron" (to bound compilations on the chip), so it triggers here too. The
    # CPU run pads the same way, so that both see the same shapes (the padding is masked out of
    # the loss, but other shapes sum in another order and AdamW magnifies that in later steps).
    assert device.args.pad_to_multiple_of == 128
    cpu = sft(tmp_path / "cpu", use_cpu=True, lora=lora, pad_to_multiple_of=128)
    losses = [[h["loss"] for h in t.state.log_history if "loss" in h] for t in (cpu, device)]
    torch.testing.assert_close(losses[1], losses[0], rtol=1e-5, atol=1e-5)


def test_lora_merge_and_unmerge_on_neuron_match_the_cpu():
    def adapted():
        torch.manual_seed(7)
        model = peft.get_peft_model(tiny_llama(), peft.LoraConfig(r=4, target_modules=["q_proj", "v_proj"],
                                                                  init_lora_weights=False))
        return model

    cpu, device = adapted(), adapted().to("neuron")
    ids = torch.randint(3, VOCAB, (2, 10), generator=torch.Generator().manual_seed(2))
    adapted_logits = cpu(input_ids=ids).logits
    torch.testing.assert_close(device(input_ids=ids.to("neuron")).logits.cpu(), adapted_logits)
    for model in (cpu, device):
        model.merge_adapter()
    merged = device(input_ids=ids.to("neuron")).logits.cpu()
    torch.testing.assert_close(merged, cpu(input_ids=ids).logits)
    torch.testing.assert_close(merged, adapted_logits, rtol=1e-4, atol=1e-5)  # merging changes rounding only
    for model in (cpu, device):
        model.unmerge_adapter()
    for (name, p), (_, q) in zip(device.named_parameters(), cpu.named_parameters()):
        torch.testing.assert_close(p.cpu(), q, msg=name)
    base = device.merge_and_unload()
    assert not isinstance(base, peft.PeftModel)
    assert {p.device.type for p in base.parameters()} == {"neuron"}
