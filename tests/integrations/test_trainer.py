"""Transformers' Trainer and Accelerate's Accelerator pick `neuron` by themselves; the loss curve,
evaluation and a resumed checkpoint match the CPU run."""
from __future__ import annotations

import pytest
import torch

from local_hf import reset_accelerate_state
from torch_neuronx.testing.tiny_hf import VOCAB, tiny_llama

transformers = pytest.importorskip("transformers")
datasets = pytest.importorskip("datasets")


def dataset():
    ids = torch.randint(3, VOCAB, (24, 12), generator=torch.Generator().manual_seed(0)).tolist()
    return datasets.Dataset.from_dict({"input_ids": ids, "labels": ids})


def trainer(out, use_cpu: bool, max_steps: int = 6, **options):
    args = transformers.TrainingArguments(
        str(out), per_device_train_batch_size=4, max_steps=max_steps, learning_rate=1e-3, logging_steps=1,
        save_steps=3, report_to=[], use_cpu=use_cpu, seed=0, data_seed=0, disable_tqdm=True, **options)
    return transformers.Trainer(model=tiny_llama(), args=args, train_dataset=dataset(), eval_dataset=dataset())


def losses(t) -> list[float]:
    return [h["loss"] for h in t.state.log_history if "loss" in h]


def test_trainer_trains_evaluates_and_resumes_on_neuron_as_on_the_cpu(tmp_path):
    cpu = trainer(tmp_path / "cpu", use_cpu=True)
    cpu.train()
    device = trainer(tmp_path / "neuron", use_cpu=False)
    device.train()
    assert device.args.device == torch.device("neuron", 0)
    assert next(device.model.parameters()).device.type == "neuron"
    torch.testing.assert_close(losses(device), losses(cpu), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(device.evaluate()["eval_loss"], cpu.evaluate()["eval_loss"], rtol=1e-5, atol=1e-5)

    # A new Trainer resumes from the step-3 checkpoint (weights, optimizer, scheduler, RNG states of
    # the CPU and the neuron devices) and logs the same last three losses as the uninterrupted run.
    resumed = trainer(tmp_path / "neuron", use_cpu=False)
    resumed.train(resume_from_checkpoint=str(tmp_path / "neuron" / "checkpoint-3"))
    torch.testing.assert_close(losses(resumed)[-3:], losses(device)[-3:], rtol=1e-6, atol=1e-6)
    for p, q in zip(resumed.model.parameters(), device.model.parameters()):
        torch.testing.assert_close(p.cpu(), q.cpu(), rtol=1e-6, atol=1e-6)


def test_bf16_mixed_precision_trains_on_neuron_close_to_the_cpu(tmp_path):
    cpu = trainer(tmp_path / "cpu", use_cpu=True, max_steps=3, bf16=True)
    cpu.train()
    device = trainer(tmp_path / "neuron", use_cpu=False, max_steps=3, bf16=True)
    device.train()
    torch.testing.assert_close(losses(device), losses(cpu), rtol=1e-2, atol=1e-2)  # bfloat16 autocast


def test_fp16_is_refused_by_accelerate_naming_the_device(tmp_path):
    """Accelerate 1.15 lists the device types fp16 mixed precision accepts and "neuron" is not one
    of them (docs/ecosystem.md): the error is Accelerate's own, raised before any step runs."""
    with pytest.raises(ValueError, match="fp16 mixed precision requires a device in .*not 'neuron'"):
        trainer(tmp_path, use_cpu=False, fp16=True)


def test_accelerator_prepares_and_steps_on_neuron_as_on_the_cpu():
    accelerate = pytest.importorskip("accelerate")

    def steps(accelerator) -> list[float]:
        model = tiny_llama()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        model, optimizer = accelerator.prepare(model, optimizer)
        ids = torch.randint(3, VOCAB, (4, 12), generator=torch.Generator().manual_seed(1)).to(accelerator.device)
        out = []
        for _ in range(3):
            loss = model(input_ids=ids, labels=ids).loss
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            out.append(loss.item())
        return out

    on_cpu = steps(accelerate.Accelerator(cpu=True))
    reset_accelerate_state()  # one Accelerator per process, as in a script
    device = accelerate.Accelerator()
    assert device.device.type == "neuron"
    torch.testing.assert_close(steps(device), on_cpu, rtol=1e-5, atol=1e-5)
