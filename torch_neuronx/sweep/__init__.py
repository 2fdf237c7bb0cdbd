"""The blind model sweep: every architecture of the installed Transformers, built tiny, run
through build, move, forward, backward, an optimizer step and ``torch.compile`` on ``neuron`` and
compared with the CPU. ``python -m torch_neuronx.sweep --help``; docs/model-coverage.md.

The top layer of the package: it imports torch_neuronx, and nothing in torch_neuronx imports it.
"""
